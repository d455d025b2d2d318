// A long kernel must not hold up other requests to the same worker: one host thread runs a
// kernel that waits for a flag in device memory, another thread (later) runs the kernel that
// sets it, and copies to and from the device in between. Prints "waited=1" when the second
// kernel ran while the first was running (0 after 20 s of waiting: it was held up).
#include <omp.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
  int dev = 0, host = omp_get_initial_device();
  int *flag = omp_target_alloc(sizeof(int), dev);
  int zero = 0, waited = -1, copied = -1;
  omp_target_memcpy(flag, &zero, sizeof zero, 0, 0, dev, host);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
#pragma omp target device(dev) is_device_ptr(flag) map(from : waited)
      {
        volatile int *f = flag;
        for (int i = 0; i < 200 && !*f; i++)
          usleep(100 * 1000);
        waited = *f;
      }
    } else {
      usleep(200 * 1000);
      int v = 5;
#pragma omp target device(dev) map(tofrom : v)
      v += 1;
      int x[4] = {1, 2, 3, 4};
#pragma omp target data map(tofrom : x) device(dev)
      {
#pragma omp target device(dev) map(tofrom : x)
        x[3] += v;
      }
      copied = x[3];
#pragma omp target device(dev) is_device_ptr(flag)
      *flag = 1;
    }
  }
  printf("waited=%d copied=%d\n", waited, copied);
  omp_target_free(flag, dev);
  return 0;
}
