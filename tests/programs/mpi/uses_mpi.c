// A program that uses MPI itself (linked with libmpi): its own MPI_Init is the only one, its
// world is its own ranks, and its target regions run on its local devices.
#include <mpi.h>
#include <omp.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, x = 20;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
#pragma omp target map(tofrom : x)
  x += 1;
  int sum = 0;
  MPI_Reduce(&x, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("size=%d devices=%d sum=%d\n", size, omp_get_num_devices(), sum);
  MPI_Finalize();
  return 0;
}
