! d is mapped with enter data and never unmapped.
program leak
  implicit none
  integer, parameter :: n = 4096
  real(8) :: d(n), s
  integer :: i
  d = 1
  s = 0
  !$omp target enter data map(to: d)
  !$omp target map(tofrom: s)
  do i = 1, n
    s = s + d(i)
  end do
  !$omp end target
  print '(a,f0.0)', 's=', s
end program
