// Contract: never touches CUDA. Prints "hello from ct_no_cuda" and exits with argv[1] (default
// 0), so tests can check that the preload and launcher leave plain programs alone.
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  std::printf("hello from ct_no_cuda\n");
  return argc > 1 ? std::atoi(argv[1]) : 0;
}
