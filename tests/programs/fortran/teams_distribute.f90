! `target teams distribute` with a reduction (flang 22; flang 19 crashes on standalone
! distribute). Expected: sum=<sum 1..n> count=<n>
program main
  implicit none
  integer, parameter :: n = 5000
  integer :: i, cnt
  integer(8) :: s
  s = 0
  cnt = 0
  !$omp target teams distribute reduction(+: s, cnt) map(tofrom: s, cnt)
  do i = 1, n
    s = s + i
    cnt = cnt + 1
  end do
  print '(a,i0,a,i0)', 'sum=', s, ' count=', cnt
end program main
