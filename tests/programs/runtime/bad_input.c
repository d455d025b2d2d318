// Bad input the runtime must survive: exit data of unmapped memory, a section that extends
// an existing mapping, an unknown device number in the API, NULL pointers.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int a[100], b[4];
  int dev = omp_get_default_device();
  #pragma omp target exit data map(release : b)
  #pragma omp target exit data map(from : b)
  printf("exit data of unmapped memory: ok\n");

  #pragma omp target enter data map(to : a[0:50])
  printf("extend rc (expect failure -> -1 from API check): present(a+60)=%d\n", omp_target_is_present(a + 60, dev));
  #pragma omp target exit data map(delete : a[0:50])

  printf("alloc on device 99: %p\n", omp_target_alloc(16, 99));
  printf("memcpy to device 99 rc=%d\n", omp_target_memcpy(a, b, 4, 0, 0, 99, omp_get_initial_device()));
  printf("is_present(NULL)=%d\n", omp_target_is_present(NULL, dev));
  printf("associate NULL rc=%d\n", omp_target_associate_ptr(NULL, NULL, 4, 0, dev));
  printf("disassociate unknown rc=%d\n", omp_target_disassociate_ptr(b, dev));
  return 0;
}
