! The loop runs one element past the mapped section a(1:n).
program bounds
  implicit none
  integer, parameter :: n = 1024
  real(8), allocatable :: a(:)
  integer :: i, m
  allocate(a(n + 1))
  m = n + 1
  !$omp target map(tofrom: a(1:n)) map(to: m)
  do i = 1, m
    a(i) = i
  end do
  !$omp end target
  print '(a,f0.0)', 'a(2)=', a(2)
end program
