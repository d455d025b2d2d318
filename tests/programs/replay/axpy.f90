! A Fortran kernel for LIBOMPTARGET_RECORD / omp-replay.
program axpy
  implicit none
  integer, parameter :: n = 5000
  real(8) :: x(n), y(n)
  integer :: i
  do i = 1, n
    x(i) = real(i, 8)
  end do
  y = 1.0d0
  !$omp target teams distribute parallel do map(to: x) map(tofrom: y)
  do i = 1, n
    y(i) = 2.0d0 * x(i) + y(i)
  end do
  !$omp end target teams distribute parallel do
  print '(a,f0.1)', 'axpy sum=', sum(y)
end program axpy
