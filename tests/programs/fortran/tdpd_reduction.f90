! `target teams distribute parallel do` with a sum reduction over 1..n (flang 22; flang 19 has
! no composite DISTRIBUTE PARALLEL DO). Also counts the iterations run, which catches a runtime
! running num_iters+1 (LLVM 19 DeviceRTL) or dropping some.
! Expected: n=<n> sum=<n(n+1)/2> count=<n> maxval=<n>
program main
  implicit none
  integer, parameter :: n = 100000
  integer(8) :: s
  integer :: i, cnt, mx
  s = 0
  cnt = 0
  mx = 0
  !$omp target teams distribute parallel do reduction(+: s, cnt) reduction(max: mx) map(tofrom: s, cnt, mx)
  do i = 1, n
    s = s + i
    cnt = cnt + 1
    mx = max(mx, i)
  end do
  print '(a,i0,a,i0,a,i0,a,i0)', 'n=', n, ' sum=', s, ' count=', cnt, ' maxval=', mx
end program main
