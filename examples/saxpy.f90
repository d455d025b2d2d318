! The Fortran version: a reduction in a target region, on a CPU-only machine.
program saxpy
  use omp_lib
  implicit none
  integer, parameter :: n = 1000000
  real(8), allocatable :: x(:), y(:)
  real(8) :: s
  integer :: i
  allocate(x(n), y(n))
  x = 1.0d0
  y = 2.0d0
  s = 0.0d0
  !$omp target parallel do map(to: x) map(tofrom: y) reduction(+: s)
  do i = 1, n
    y(i) = 3.0d0 * x(i) + y(i)
    s = s + y(i)
  end do
  print '(a, f12.1)', 'saxpy: sum = ', s
end program saxpy
