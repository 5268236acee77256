// The fake torch's libtorch_cpu.so: the one piece of PyTorch's autograd engine the capture names,
// Engine::evaluate_function, under its real mangled name (a name depends on its parameters'
// type names only, so those types are empty here), run on a thread of its own as PyTorch's engine
// thread runs the backward pass. The preload ends that thread's stack walks at it
// (preload/python/cumemtrace_torch.py). The thread allocates through the fake caching allocator of
// libc10_cuda.so, as a backward op does.
#include <cstddef>
#include <memory>
#include <thread>

extern "C" void* fake_torch_malloc(size_t size);  // fake_c10_cuda.cpp

namespace torch::autograd {

struct GraphTask {
  size_t bytes = 0;
  void* result = nullptr;
};
struct Node {};
struct InputBuffer {};
struct ReadyQueue {};

struct Engine {
  // PyTorch's signature; the fake's body runs "the node": one allocation of the task's size.
  __attribute__((visibility("default"), noinline)) void evaluate_function(
      std::shared_ptr<GraphTask>& graph_task, Node* func, InputBuffer& inputs,
      const std::shared_ptr<ReadyQueue>& cpu_ready_queue);
  __attribute__((noinline)) void thread_main(std::shared_ptr<GraphTask>& task);
};

void Engine::evaluate_function(std::shared_ptr<GraphTask>& graph_task, Node*, InputBuffer&,
                               const std::shared_ptr<ReadyQueue>&) {
  graph_task->result = fake_torch_malloc(graph_task->bytes);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays while the allocator runs
}

void Engine::thread_main(std::shared_ptr<GraphTask>& task) {
  InputBuffer inputs;
  const std::shared_ptr<ReadyQueue> queue;
  evaluate_function(task, nullptr, inputs, queue);
  asm volatile("" ::: "memory");
}

}  // namespace torch::autograd

// An allocation of `size` bytes on an engine thread of its own, as the backward pass allocates;
// its address.
extern "C" __attribute__((visibility("default"))) void* fake_torch_malloc_on_engine_thread(
    size_t size) {
  auto task = std::make_shared<torch::autograd::GraphTask>();
  task->bytes = size;
  std::thread([&] { torch::autograd::Engine{}.thread_main(task); }).join();
  return task->result;
}
