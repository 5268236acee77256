#include <catch2/catch.hpp>

#include "viz/allocation_site.h"

using namespace cumemtrace;
using viz::frame_label;
using viz::short_function_name;
using viz::site_of;

TEST_CASE("site_of prefers the innermost Python frame") {
  snap::Stack s = {
      {"CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::malloc(unsigned long)"},
      {"conv.py", 548, "_conv_forward"},
      {"model.py", 12, "forward"}};
  REQUIRE(site_of(s)->name == "_conv_forward");
}

TEST_CASE("site_of skips capture, allocator and dispatcher frames in native stacks") {
  snap::Stack s = {
      {"??", 0, "torch::unwind::unwind()"},
      {"", 0,
       "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
      {"??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"},
      {"RegisterCUDA_0.cpp", 0, "at::(anonymous namespace)::create_out(c10::ArrayRef<long>)"},
      {"??", 0, "at::native::convolution_backward(at::Tensor const&)"},
      {"??", 0, "__clone"}};
  REQUIRE(site_of(s)->name == "at::native::convolution_backward(at::Tensor const&)");
  REQUIRE(frame_label(*site_of(s)) == "at::native::convolution_backward");
}

TEST_CASE("site_of falls back to the innermost frame when all are machinery") {
  snap::Stack s = {{"libcudart.so", 0, "cudaMalloc"}, {"libcudart.so", 0, "cudaMallocAsync"}};
  REQUIRE(site_of(s)->name == "cudaMalloc");
  REQUIRE(site_of(snap::Stack{}) == nullptr);
}

TEST_CASE("short_function_name cuts parameter lists only") {
  REQUIRE(short_function_name("at::(anonymous namespace)::create_out(c10::ArrayRef<long>)") ==
          "at::(anonymous namespace)::create_out");
  REQUIRE(short_function_name("std::vector<int (*)(int)>::push_back(int)") ==
          "std::vector<int (*)(int)>::push_back");
  REQUIRE(short_function_name("Foo::operator()(int) const") == "Foo::operator()");
  REQUIRE(short_function_name("main") == "main");
  REQUIRE(short_function_name("(anonymous namespace)::f(int)") == "(anonymous namespace)::f");
}

TEST_CASE("frame_label shows the file's base name and a known line") {
  REQUIRE(frame_label({"/src/a/model.py", 42, "forward"}) == "forward (model.py:42)");
  REQUIRE(frame_label({"Conv.cpp", 0, "f(int)"}) == "f (Conv.cpp)");
  REQUIRE(frame_label({"??", 0, "main"}) == "main");
  REQUIRE(frame_label({"", 0, ""}) == "??");
}

TEST_CASE("visible_frames drops what PyTorch's viewer hides but never empties a stack") {
  snap::Stack s = {{"??", 0, "torch::unwind::unwind()"},
                   {"ceval.c", 0, "_PyEval_EvalFrameDefault"},
                   {"model.py", 3, "forward"}};
  auto v = viz::visible_frames(s);
  REQUIRE(v.size() == 1);
  REQUIRE(v[0]->name == "forward");
  snap::Stack hidden = {{"??", 0, "_start"}};
  REQUIRE(viz::visible_frames(hidden).size() == 1);
  REQUIRE_FALSE(viz::is_hidden_frame({"x.cpp", 1, "on_start"}));
}
