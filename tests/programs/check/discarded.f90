! The kernel doubles b and asks for it back (tofrom), but the enclosing target data maps
! it to only: the copy back never comes, the results stay on the device.
program discarded
  implicit none
  integer, parameter :: n = 4096
  real(8) :: b(n)
  integer :: i
  b = 1
  !$omp target data map(to: b)
  !$omp target map(tofrom: b)
  do i = 1, n
    b(i) = 2 * b(i)
  end do
  !$omp end target
  !$omp end target data
  print '(a,f0.0)', 'b(1)=', b(1)
end program
