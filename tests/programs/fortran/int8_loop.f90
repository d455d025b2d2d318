! An integer(8) `target parallel do` (the runtime's _8u entry point).
! Expected: sum=<sum 1..n> count=<n>
program main
  implicit none
  integer(8), parameter :: n = 50000_8
  integer(8) :: i, s, cnt
  s = 0
  cnt = 0
  !$omp target parallel do reduction(+: s, cnt) map(tofrom: s, cnt)
  do i = 1_8, n
    s = s + i
    cnt = cnt + 1
  end do
  print '(a,i0,a,i0)', 'sum=', s, ' count=', cnt
end program main
