#include "session/session.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/config.h"
#include "core/emitter.h"
#include "core/event_clock.h"
#include "core/log.h"
#include "driver/stream_devices.h"
#include "record/pool_sampler.h"
#include "record/recorder.h"
#include "record/recording_meter.h"
#include "stacks/cfi_unwinder.h"
#include "stacks/module_map.h"
#include "stacks/python_stack.h"
#include "wire/control_protocol.h"

extern char** environ;

namespace cumemtrace::preload {

namespace {
int g_live_fd = -1;  // our end of the liveness socketpair
// Which socket that is: a program that closes every descriptor may reuse the number.
dev_t g_live_dev = 0;
ino_t g_live_ino = 0;
void* g_ring_map = nullptr;
size_t g_ring_bytes = 0;
bool g_process_hooks_installed = false;
// The ring the SIGUSR2 handler counts requests in; null while there is none (before the session,
// in a forked child until its own session starts).
std::atomic<wire::RingHeader*> g_request_ring{nullptr};
// Requests that arrived after the handler was installed (the ring's name in /proc/PID/maps tells
// `cumemtrace snapshot` it may signal) but before the collector acknowledged the ring: moved into
// the ring once attached, so a request made right after start-up is written, not lost.
std::atomic<uint32_t> g_early_requests{0};

// The rank PyTorch's process group reported (cumemtrace_rank_info) before this process's session
// started: kept here, sent as the session's first records. Written before `g_rank_pending` is set
// (release); whichever thread takes the flag back (exchange) sends it, so it is sent once.
char g_rank_text[256];
std::atomic<bool> g_rank_pending{false};

void send_rank_info() {
  if (g_rank_pending.exchange(false, std::memory_order_acq_rel)) {
    record_string(wire::Kind::kRankInfo, 0, g_rank_text);
  }
}

// The control fd named by the launcher must really be a SEQPACKET Unix socket: a program may
// have closed it and reused the number for something else.
bool is_control_socket(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) return false;
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0 && ss.ss_family == AF_UNIX;
}

// `cumemtrace run`'s rendezvous socket (collector/live/rendezvous.h): a process whose parent
// closed the inherited control fd (Python's subprocess, torchrun's workers) reaches run's
// collector there. -1 when there is none or nobody listens (run is gone): the caller then starts
// a collector of its own, as before.
int connect_rendezvous() {
  const char* path = g_config.control_socket;
  sockaddr_un addr{};
  if (!path || !*path || strlen(path) >= sizeof addr.sun_path) return -1;
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, strlen(path) + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int r;
  do {
    r = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Finds the collector: $CUMEMTRACE_COLLECTOR, else next to this library (lib/../bin/cumemtrace
// in both the build tree and an installed tree, or the same directory).
bool find_collector(char* out, size_t cap) {
  if (g_config.collector) {
    snprintf(out, cap, "%s", g_config.collector);
    return access(out, X_OK) == 0;
  }
  Dl_info di;
  if (!dladdr(reinterpret_cast<void*>(&find_collector), &di) || !di.dli_fname) return false;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", di.dli_fname);
  char* slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
  } else {
    snprintf(dir, sizeof dir, ".");
  }
  snprintf(out, cap, "%s/../bin/cumemtrace", dir);
  if (access(out, X_OK) == 0) return true;
  snprintf(out, cap, "%s/cumemtrace", dir);
  return access(out, X_OK) == 0;
}

// Starts a detached collector for this process: it daemonizes itself (the intermediate child
// exits at once and is reaped here), so the application never sees it as a child.
int spawn_collector() {
  char path[4096];
  if (!find_collector(path, sizeof path)) {
    print_line("collector executable not found (set CUMEMTRACE_COLLECTOR); tracing disabled");
    return -1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    print_line("socketpair failed; tracing disabled: ", strerror(errno));
    return -1;
  }
  // The collector must not trace itself: pass the environment without LD_PRELOAD.
  static char* envp[4096];
  size_t n = 0;
  for (char** e = environ; e && *e && n + 1 < sizeof envp / sizeof *envp; ++e) {
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) envp[n++] = *e;
  }
  envp[n] = nullptr;
  const char* out = g_config.output ? g_config.output : ".";
  char* argv[] = {path,
                  const_cast<char*>("__collect"),
                  const_cast<char*>("--control-fd"),
                  const_cast<char*>("3"),
                  const_cast<char*>("--output"),
                  const_cast<char*>(out),
                  const_cast<char*>("--daemonize"),
                  nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, path, &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    print_line("cannot start the collector; tracing disabled: ", strerror(rc));
    return -1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return sv[0];
}

size_t read_file(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n < cap) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  close(fd);
  return n;
}

bool send_hello(int ctl, int memfd, int live_remote) {
  static char msg[wire::kMaxHelloBytes];
  auto* h = reinterpret_cast<wire::Hello*>(msg);
  memset(h, 0, sizeof *h);
  h->magic = wire::kHelloMagic;
  h->wire_version = wire::kWireVersion;
  h->pid = getpid();
  h->ppid = getppid();
  h->ring_bytes = g_ring_bytes;
  char* p = msg + sizeof *h;
  const size_t room = sizeof msg - sizeof *h;
  ssize_t exe = readlink("/proc/self/exe", p, room / 4);
  h->exe_bytes = exe > 0 ? static_cast<uint32_t>(exe) : 0;
  p += h->exe_bytes;
  size_t argv_bytes = read_file("/proc/self/cmdline", p, room / 2);
  h->argv_bytes = static_cast<uint32_t>(argv_bytes);
  p += argv_bytes;
  // Every variable collector/analysis/rank_identity.cpp reads (its kSources, the job's id and the
  // node's rank), plus the run id that tells a torchrun worker whose rank came from its process
  // group.
  static const char* kRankVars[] = {"RANK",
                                    "LOCAL_RANK",
                                    "WORLD_SIZE",
                                    "LOCAL_WORLD_SIZE",
                                    "GROUP_RANK",
                                    "TORCHELASTIC_RUN_ID",
                                    "SLURM_PROCID",
                                    "SLURM_LOCALID",
                                    "SLURM_NTASKS",
                                    "SLURM_JOB_ID",
                                    "SLURM_NODEID",
                                    "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_SIZE",
                                    "PMI_RANK",
                                    "PMI_SIZE",
                                    "MPI_LOCALRANKID"};
  char* end = msg + sizeof msg;
  for (const char* var : kRankVars) {
    const char* v = getenv(var);
    if (!v) continue;
    int w = snprintf(p, static_cast<size_t>(end - p), "%s=%s", var, v);
    if (w < 0 || p + w + 1 >= end) break;
    p += w + 1;
    h->rank_bytes += static_cast<uint32_t>(w + 1);
  }
  iovec iov{msg, static_cast<size_t>(p - msg)};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
  int fds[2] = {memfd, live_remote};
  memcpy(CMSG_DATA(cm), fds, sizeof fds);
  ssize_t r;
  do {
    r = sendmsg(ctl, &mh, MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  return r == static_cast<ssize_t>(iov.iov_len);
}

bool wait_ack(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  int r;
  do {
    r = poll(&pfd, 1, 10000);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) {
    print_line("the collector did not answer; tracing disabled");
    return false;
  }
  wire::Ack ack{};
  ssize_t n;
  do {
    n = recv(fd, &ack, sizeof ack, 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof ack) || ack.magic != wire::kAckMagic) {
    print_line("the collector closed the connection; tracing disabled");
    return false;
  }
  if (ack.status != 0) {
    ack.message[sizeof ack.message - 1] = '\0';
    print_line(ack.message, "; tracing disabled");
    return false;
  }
  return true;
}

// CUMEMTRACE_DEBUG: how often the cached unwinder handed a stack to _Unwind_Backtrace (about
// 5 us for 32 frames instead of 0.3), and where: the frames to teach it next.
void print_fallbacks() {
  const cfi::FallbackStats f = cfi::fallback_stats();
  char line[512];
  int n = std::snprintf(line, sizeof line, "%llu stacks fell back to _Unwind_Backtrace",
                        static_cast<unsigned long long>(f.stacks));
  for (uint64_t pc : f.pcs) {
    if (pc == UINT64_MAX || n < 0 || n >= static_cast<int>(sizeof line)) break;
    Dl_info di{};
    const bool named = pc && dladdr(reinterpret_cast<void*>(pc), &di) && di.dli_fname;
    const char* base = named ? std::strrchr(di.dli_fname, '/') : nullptr;
    n += std::snprintf(line + n, sizeof line - n, "%s %s+%#llx", pc == f.pcs[0] ? ":" : ",",
                       named ? (base ? base + 1 : di.dli_fname) : (pc ? "?" : "unbounded stack"),
                       static_cast<unsigned long long>(
                           named ? pc - reinterpret_cast<uint64_t>(di.dli_fbase) : pc));
  }
  print_line(line);
}

// CUMEMTRACE_DEBUG: whether the program waited for the collector (a ring too small for its event
// rate, or a collector without a core of its own), which a recording cost then includes.
void print_ring_waits() {
  const auto f = g_ring.full_stats();
  char line[160];
  std::snprintf(line, sizeof line,
                "the ring was full %llu times; the program waited %.3f ms for "
                "the collector (--buffer-mb raises the ring's size)",
                static_cast<unsigned long long>(f.waits), static_cast<double>(f.wait_ns) / 1e6);
  print_line(line);
}

// The collector's end of the liveness socket closes when it dies (killed): nobody will write
// this process's snapshot, and the user hears it once, here at the end (RingProducer says it too
// when a full ring finds the collector gone). A poll with no wait: no heap, no locks.
void say_if_collector_gone() {
  if (g_live_fd < 0) return;
  struct stat st {};
  if (fstat(g_live_fd, &st) != 0 || st.st_dev != g_live_dev || st.st_ino != g_live_ino) return;
  pollfd p{g_live_fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) g_ring.collector_lost();
}

// The process's last record, from exit() (on_process_exit) or _exit()/_Exit() alike; then the
// one line if the collector is gone.
void record_exit(int status) {
  EventArgs a{wire::Kind::kExit};
  a.result = status;
  record(a);
  say_if_collector_gone();
}

void on_process_exit(int status, void*) {
  if (g_session_state.load(std::memory_order_acquire) != static_cast<int>(SessionState::kRunning))
    return;
  if (config().debug) {
    print_fallbacks();
    print_stream_device_stats();
    print_ring_waits();
    print_meter();
  }
  // Before the exit record: the snapshot written at exit has each pool's final state. Runs
  // before CUDA's own atexit teardown (registered earlier, so run later).
  sample_pools_at_exit();
  record_exit(status);
}

// `kill -USR2 PID` / `cumemtrace snapshot PID`: only an atomic increment, async-signal-safe.
void on_snapshot_signal(int) {
  if (wire::RingHeader* h = g_request_ring.load(std::memory_order_acquire)) {
    h->snapshot_requests.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_early_requests.fetch_add(1, std::memory_order_relaxed);
  }
}

// SIGUSR2 is taken only where the program left it at its default (which would kill it): a
// handler or an ignore the program chose stays as it is, and then snapshots on demand are
// unavailable. Also true when it is ours already (a forked child starting its own session).
bool snapshot_signal_free() {
  struct sigaction old {};
  if (sigaction(SIGUSR2, nullptr, &old) != 0) return false;
  if (old.sa_flags & SA_SIGINFO) return false;
  return old.sa_handler == SIG_DFL || old.sa_handler == on_snapshot_signal;
}

void install_snapshot_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_snapshot_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
}

// A forked child has no session until its first event: give SIGUSR2 back its default meanwhile
// (the child's session takes it again when it starts).
void release_snapshot_signal() {
  g_request_ring.store(nullptr, std::memory_order_relaxed);
  g_early_requests.store(0, std::memory_order_relaxed);
  struct sigaction old {};
  if (sigaction(SIGUSR2, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
      old.sa_handler == on_snapshot_signal) {
    signal(SIGUSR2, SIG_DFL);
  }
}

// In a forked child the parent's ring, liveness socket and thread ids are not ours: forget them
// (without touching the parent's ring) and start over lazily on the child's first event.
void on_fork_child() {
  release_snapshot_signal();
  g_ring.detach();
  if (g_ring_map) munmap(g_ring_map, g_ring_bytes);
  g_ring_map = nullptr;
  if (g_live_fd >= 0) {
    struct stat st {};
    if (fstat(g_live_fd, &st) == 0 && st.st_dev == g_live_dev && st.st_ino == g_live_ino) {
      close(g_live_fd);
    }
  }
  g_live_fd = -1;
  modules_reset();
  forget_thread_cache();
  cfi::memo_after_fork();
  forget_devices();
  forget_pools();
  python_stack_reset();
  g_session_state.store(
      static_cast<int>(g_config.follow ? SessionState::kIdle : SessionState::kOff),
      std::memory_order_release);
}

bool start() {
  if (getauxval(AT_SECURE)) return false;  // setuid/setgid: never trace
  if (!load_config(g_config)) return false;
  // Before the handshake, which may take a while: a child forked meanwhile by another thread
  // must not inherit a session that is "starting" with no thread of its own to finish it.
  if (!g_process_hooks_installed) {
    g_process_hooks_installed = true;
    on_exit(on_process_exit, nullptr);
    pthread_atfork(nullptr, nullptr, on_fork_child);
  }

  int ctl = -1;
  bool own_ctl = false;
  // A launcher's parent may have closed the inherited control socket before exec (Python's
  // subprocess closes every descriptor; torchrun starts its workers that way): such a process
  // reaches `run`'s collector through its rendezvous socket, and only when that is gone too gets
  // a collector of its own, writing to the same directory (CUMEMTRACE_OUTPUT).
  if (g_config.control_fd >= 0 && is_control_socket(g_config.control_fd)) {
    ctl = g_config.control_fd;
  } else {
    ctl = connect_rendezvous();
    if (ctl < 0) ctl = spawn_collector();
    if (ctl < 0) return false;
    own_ctl = true;
  }

  g_ring_bytes = wire::ring_bytes(g_config.ring_slots);
  // The ring's name (visible in /proc/PID/maps) tells `cumemtrace snapshot PID` whether this
  // process takes SIGUSR2 for snapshots, so that it never signals one that would not: the
  // handler is in place before the ring exists (it ignores requests until the ring is attached).
  // It ends with this process's pid (wire/control_protocol.h): the collector maps the ring too,
  // and must not be taken for the process it traces.
  const bool take_usr2 = snapshot_signal_free();
  if (take_usr2) install_snapshot_signal();
  char ring_name[64];
  snprintf(ring_name, sizeof ring_name, "%s.%d", take_usr2 ? wire::kRingNameUsr2 : wire::kRingName,
           static_cast<int>(getpid()));
  int memfd = static_cast<int>(syscall(SYS_memfd_create, ring_name, MFD_CLOEXEC));
  // The ring's first kPrefaultBytes are allocated and mapped now, not page by page inside the
  // hooks: a first touch costs every event of the first lap a page fault (about 40 ns per event
  // measured on the build machine), and a shared-memory limit reached there would be a SIGBUS in
  // the application instead of this one line. A larger ring (CUMEMTRACE_BUFFER_MB) is committed
  // beyond that only as it fills. A kernel without fallocate on memfd allocates on the touch.
  constexpr size_t kPrefaultBytes = size_t{64} << 20;
  const size_t prefault = g_ring_bytes < kPrefaultBytes ? g_ring_bytes : kPrefaultBytes;
  if (memfd < 0 || ftruncate(memfd, static_cast<off_t>(g_ring_bytes)) != 0 ||
      (fallocate(memfd, 0, 0, static_cast<off_t>(prefault)) != 0 && errno != EOPNOTSUPP &&
       errno != ENOSYS)) {
    print_line("cannot create the ring buffer; tracing disabled: ", strerror(errno));
    if (memfd >= 0) close(memfd);
    if (own_ctl) close(ctl);
    return false;
  }
  void* map = mmap(nullptr, g_ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (map == MAP_FAILED) {
    print_line("cannot map the ring buffer; tracing disabled: ", strerror(errno));
    close(memfd);
    if (own_ctl) close(ctl);
    return false;
  }
  // Zeros over zeros: maps the pages (the ring is nobody else's yet).
  for (size_t off = 0; off < prefault; off += 4096) static_cast<volatile char*>(map)[off] = 0;
  auto* hdr = new (map) wire::RingHeader{};
  hdr->magic = wire::kMagic;
  hdr->version = wire::kWireVersion;
  hdr->capacity = g_config.ring_slots;
  hdr->pid = getpid();
  hdr->ppid = getppid();
  hdr->start_realtime_ns = clock_ns(CLOCK_REALTIME);
  hdr->time_source =
      choose_event_clock(g_config.coarse_clock, hdr->start_tsc, hdr->start_monotonic_ns);
  meter_start(meter_time(), clock_ns(CLOCK_MONOTONIC));
  hdr->stack_depth = g_config.stack_depth;
  // A fresh memfd reads as zeros, so every slot's seq is 0 ("not yet written": ticket + 1 > 0).
  auto* slots = reinterpret_cast<wire::Slot*>(static_cast<char*>(map) + wire::kHeaderBytes);

  int live[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, live) != 0) {
    print_line("socketpair failed; tracing disabled: ", strerror(errno));
    munmap(map, g_ring_bytes);
    close(memfd);
    if (own_ctl) close(ctl);
    return false;
  }
  const bool sent = send_hello(ctl, memfd, live[1]);
  close(memfd);
  close(live[1]);
  if (own_ctl) close(ctl);  // the collector exits once every traced process is gone
  if (!sent) {
    print_line("cannot reach the collector; tracing disabled: ", strerror(errno));
    close(live[0]);
    munmap(map, g_ring_bytes);
    return false;
  }
  if (!wait_ack(live[0])) {
    close(live[0]);
    munmap(map, g_ring_bytes);
    return false;
  }
  struct stat st {};
  fstat(live[0], &st);
  g_live_dev = st.st_dev;
  g_live_ino = st.st_ino;
  g_live_fd = live[0];
  g_ring_map = map;
  g_ring.attach(hdr, slots, g_config.max_wait_ns);
  // A request the handler counts from here on goes to the ring; one before, to the early count.
  g_request_ring.store(hdr, std::memory_order_release);
  if (const uint32_t early = g_early_requests.exchange(0, std::memory_order_relaxed)) {
    hdr->snapshot_requests.fetch_add(early, std::memory_order_relaxed);
  }
  return true;
}

}  // namespace

bool ensure_session_slow() noexcept {
  int s = g_session_state.load(std::memory_order_acquire);
  if (s == static_cast<int>(SessionState::kRunning)) return true;
  if (s == static_cast<int>(SessionState::kOff)) return false;
  int expected = static_cast<int>(SessionState::kIdle);
  if (g_session_state.compare_exchange_strong(expected,
                                              static_cast<int>(SessionState::kStarting))) {
    const bool ok = start();
    if (ok) set_plain_kinds();
    if (!ok) release_snapshot_signal();  // tracing is off: SIGUSR2 means what it did before
    g_session_state.store(static_cast<int>(ok ? SessionState::kRunning : SessionState::kOff),
                          std::memory_order_release);
    if (ok) modules_send_all();
    if (ok) send_rank_info();
    return ok;
  }
  // Another thread is starting the session: wait for it (bounded by the ack timeout).
  while ((s = g_session_state.load(std::memory_order_acquire)) ==
         static_cast<int>(SessionState::kStarting)) {
    timespec ts{0, 100000};
    nanosleep(&ts, nullptr);
  }
  return s == static_cast<int>(SessionState::kRunning);
}

// _exit()/_Exit(): the process ends without its atexit handlers, so its exit record is written
// here: the snapshot says "exit" with the status, instead of guessing from /proc after a parent
// may have reaped it. Only a process whose session runs and is its own (not a vfork child, which
// shares its parent's memory and ring); then the same system call as glibc's _exit.
[[noreturn]] void end_process_now(int status) noexcept {
  auto* ring = static_cast<const wire::RingHeader*>(g_ring_map);
  if (g_session_state.load(std::memory_order_acquire) == static_cast<int>(SessionState::kRunning) &&
      ring && ring->pid == static_cast<int32_t>(syscall(SYS_getpid))) {
    record_exit(status);
  }
  for (;;) syscall(SYS_exit_group, status);
}

int keep_rank_info(const char* text) noexcept {
  if (!text || strlen(text) >= sizeof g_rank_text || !tracing_possible()) return -1;
  ReentryGuard guard;
  if (!guard.outer) return -1;
  memcpy(g_rank_text, text, strlen(text) + 1);
  g_rank_pending.store(true, std::memory_order_release);
  if (g_session_state.load(std::memory_order_acquire) == static_cast<int>(SessionState::kRunning)) {
    send_rank_info();
  }
  return 0;
}

int pause_recording_for_bench(int paused) noexcept {
  const int from = static_cast<int>(paused ? SessionState::kRunning : SessionState::kPaused);
  const int to = static_cast<int>(paused ? SessionState::kPaused : SessionState::kRunning);
  int s = from;
  if (g_session_state.compare_exchange_strong(s, to, std::memory_order_acq_rel)) return 0;
  return s == to ? 0 : -1;
}

}  // namespace cumemtrace::preload
