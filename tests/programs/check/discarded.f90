! The kernel doubles b, but b is mapped to only: the results stay on the device.
program discarded
  implicit none
  integer, parameter :: n = 4096
  real(8) :: b(n)
  integer :: i
  b = 1
  !$omp target map(to: b)
  do i = 1, n
    b(i) = 2 * b(i)
  end do
  !$omp end target
  print '(a,f0.0)', 'b(1)=', b(1)
end program
