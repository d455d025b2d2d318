// A target region in a static destructor, after main: the worker must still be there.
#include <cstdio>
struct Late {
  ~Late() {
    int x = 1;
#pragma omp target map(tofrom : x)
    x += 41;
    std::printf("destructor: x=%d\n", x);
  }
};
static Late late;
int main() {
  int y = 0;
#pragma omp target map(tofrom : y)
  y = 1;
  std::printf("main: y=%d\n", y);
}
