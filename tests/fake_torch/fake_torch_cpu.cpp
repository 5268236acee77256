// The fake torch's libtorch_cpu.so: the pieces of PyTorch's autograd engine the capture names,
// under their real mangled names (a name depends on its parameters' type names only, so most of
// those types are empty here), run on a thread of their own as PyTorch's engine thread runs the
// backward pass:
// - Engine::evaluate_function, where the preload ends that thread's stack walks;
// - get_current_node(), which returns the node being evaluated (set by thread_main, as
//   PyTorch's NodeGuard does), and a generated node, MmBackward0, whose vtable and apply() the
//   Python side reads to find Node::apply's slot (preload/python/cumemtrace_torch.py).
// The node's apply() allocates through the fake caching allocator of libc10_cuda.so, as a
// backward op does (or, asked to, straight from the driver's stream-ordered pool, as a C++
// extension's op may); thread_main evaluates it twice (the first event of the thread is the one
// whose walk tells the preload it is an engine thread), then allocates once more outside any node.
// Nodes are numbered as PyTorch numbers them: Node's constructor calls
// at::sequence_number::get_and_increment() (through the PLT, as libtorch_cpu.so's code does, so
// the preload's interposition reaches it) and keeps the creating thread's
// at::RecordFunction::currentThreadId(), at torch 2.11's offsets (24 and 48). A forward makes
// nodes (fake_torch_make_node, from inside a module call of the test's Python), and a backward
// evaluates them all on an engine thread, each allocating the bytes it was made with.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gpa_loader.h"

extern "C" int fake_torch_set_device_of_thread();  // fake_c10_cuda.cpp
extern "C" void* fake_torch_malloc(size_t size);

#define FAKE_API __attribute__((visibility("default")))

namespace at {
struct Tensor {
  void* data = nullptr;
  size_t bytes = 0;
};

namespace sequence_number {
FAKE_API uint64_t peek();
FAKE_API uint64_t get_and_increment();
namespace {
thread_local uint64_t sequence_nr_ = 0;
}
uint64_t peek() {
  return sequence_nr_;
}
uint64_t get_and_increment() {
  return sequence_nr_++;
}
}  // namespace sequence_number

struct FAKE_API RecordFunction {
  static uint64_t currentThreadId();
};
namespace {
std::atomic<uint64_t> next_thread_id{0};
thread_local uint64_t current_thread_id = 0;
}  // namespace
uint64_t RecordFunction::currentThreadId() {
  if (!current_thread_id) current_thread_id = ++next_thread_id;
  return current_thread_id;
}
}  // namespace at

namespace torch::autograd {

struct GraphTask {
  size_t bytes = 0;
  bool from_driver = false;  // the node allocates with cuMemAllocAsync itself
  void* in_node[2] = {};
  int evaluated = 0;
  void* outside_node = nullptr;
};
struct InputBuffer {};
struct ReadyQueue {};

// PyTorch's Node has more virtual functions before apply(); two are enough to make its slot one
// the Python side must find rather than the first.
// PyTorch's fields in PyTorch's order (torch/csrc/autograd/function.h), then the fake's own.
struct FAKE_API Node : std::enable_shared_from_this<Node> {
  Node() : sequence_nr_(at::sequence_number::get_and_increment()) {
    thread_id_ = at::RecordFunction::currentThreadId();
  }
  virtual ~Node() = default;
  virtual bool is_traceable() { return false; }
  virtual std::vector<at::Tensor> apply(std::vector<at::Tensor>&& inputs) = 0;
  uint64_t sequence_nr_;
  uint64_t topological_nr_ = 0;
  bool has_parent_ = false;
  uint64_t thread_id_ = 0;
  size_t bytes_ = 0;  // a node of the forward allocates this much in backward (0: its input's)
};

namespace generated {
struct FAKE_API MmBackward0 : Node {
  std::vector<at::Tensor> apply(std::vector<at::Tensor>&& inputs) override;
};

thread_local const GraphTask* t_task = nullptr;  // the task thread_main runs

// cuMemAllocAsync on the default stream, as an extension's op would call it.
void* driver_pool_malloc(size_t bytes) {
  static cumemtrace::testprog::DriverEntryPoints d{};
  static const bool loaded = cumemtrace::testprog::load_driver_entry_points(&d);
  CUdeviceptr p = 0;
  return loaded && d.memAllocAsync(&p, bytes, nullptr) == CUDA_SUCCESS ? reinterpret_cast<void*>(p)
                                                                       : nullptr;
}

std::vector<at::Tensor> MmBackward0::apply(std::vector<at::Tensor>&& inputs) {
  std::vector<at::Tensor> out(1);
  out[0].bytes = bytes_ ? bytes_ : inputs.at(0).bytes;
  out[0].data = t_task && t_task->from_driver ? driver_pool_malloc(out[0].bytes)
                                              : fake_torch_malloc(out[0].bytes);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays while the allocator runs
  return out;
}
}  // namespace generated

namespace {
thread_local std::shared_ptr<Node> current_evaluating_node;
}

FAKE_API std::shared_ptr<Node> get_current_node() {
  return current_evaluating_node;
}

struct Engine {
  // PyTorch's signature; the fake's body runs the node on one input of the task's size.
  FAKE_API __attribute__((noinline)) void evaluate_function(
      std::shared_ptr<GraphTask>& graph_task, Node* func, InputBuffer& inputs,
      const std::shared_ptr<ReadyQueue>& cpu_ready_queue);
  __attribute__((noinline)) void thread_main(std::shared_ptr<GraphTask>& task);
};

void Engine::evaluate_function(std::shared_ptr<GraphTask>& graph_task, Node* func, InputBuffer&,
                               const std::shared_ptr<ReadyQueue>&) {
  std::vector<at::Tensor> in(1);
  in[0].bytes = graph_task->bytes;
  graph_task->in_node[graph_task->evaluated++] = func->apply(std::move(in)).at(0).data;
  asm volatile("" ::: "memory");
}

void Engine::thread_main(std::shared_ptr<GraphTask>& task) {
  if (fake_torch_set_device_of_thread() != 0) return;  // as each device thread starts
  generated::t_task = task.get();
  InputBuffer inputs;
  const std::shared_ptr<ReadyQueue> queue;
  std::shared_ptr<Node> node = std::make_shared<generated::MmBackward0>();
  current_evaluating_node = node;  // PyTorch's NodeGuard
  evaluate_function(task, node.get(), inputs, queue);
  evaluate_function(task, node.get(), inputs, queue);
  current_evaluating_node = nullptr;
  task->outside_node = fake_torch_malloc(task->bytes);
  asm volatile("" ::: "memory");
}

}  // namespace torch::autograd

// Three allocations of `size` bytes on an engine thread of their own, as the backward pass
// allocates: two by a node (MmBackward0) under evaluate_function, through the caching allocator
// or, with `from_driver`, straight from the driver's pool, the third by the thread's loop outside
// any node. Their addresses, in that order.
extern "C" FAKE_API void fake_torch_allocs_on_engine_thread(size_t size, void** in_node,
                                                            void** outside_node, int from_driver) {
  auto task = std::make_shared<torch::autograd::GraphTask>();
  task->bytes = size;
  task->from_driver = from_driver != 0;
  std::thread([&] { torch::autograd::Engine{}.thread_main(task); }).join();
  in_node[0] = task->in_node[0];
  in_node[1] = task->in_node[1];
  *outside_node = task->outside_node;
}

namespace {
std::vector<std::shared_ptr<torch::autograd::Node>> g_forward_nodes;  // the graph, in order
}

// A forward op's node, made on the calling thread (numbered there); evaluated by the next
// fake_torch_backward_of_nodes, where it allocates `bytes`. Returns its sequence number.
extern "C" FAKE_API uint64_t fake_torch_make_node(size_t bytes) {
  auto node = std::make_shared<torch::autograd::generated::MmBackward0>();
  node->bytes_ = bytes;
  g_forward_nodes.push_back(node);
  return node->sequence_nr_;
}

// The backward of the nodes made since the last one, on an engine thread of its own: each node,
// latest first, allocates its bytes under evaluate_function. Their addresses into out[0..n), n at
// most `max`; returns n.
extern "C" FAKE_API size_t fake_torch_backward_of_nodes(void** out, size_t max) {
  std::vector<void*> got;
  std::thread([&] {
    using namespace torch::autograd;
    if (fake_torch_set_device_of_thread() != 0) return;
    auto task = std::make_shared<GraphTask>();
    InputBuffer inputs;
    const std::shared_ptr<ReadyQueue> queue;
    Engine engine;
    for (auto it = g_forward_nodes.rbegin(); it != g_forward_nodes.rend(); ++it) {
      current_evaluating_node = *it;
      task->evaluated = 0;
      engine.evaluate_function(task, it->get(), inputs, queue);
      got.push_back(task->in_node[0]);
    }
    current_evaluating_node = nullptr;
  }).join();
  g_forward_nodes.clear();
  size_t n = 0;
  for (; n < got.size() && n < max; ++n) out[n] = got[n];
  return n;
}
