! `declare target link` module variable assigned in a target region (the issue's reproducer).
! Expected: sp=1
module test_0
  implicit none
  integer :: sp = 0
  !$omp declare target link(sp)
end module test_0

program main
  use test_0
  implicit none
  !$omp target map(tofrom: sp)
  sp = 1
  !$omp end target
  print '(a,i0)', 'sp=', sp
end program main
