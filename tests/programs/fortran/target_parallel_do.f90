! `target parallel do` writing an array; records which thread ran each iteration.
! Expected: n=<n> bad=0 count=<n> threads=<number of threads that ran iterations>
program main
  use omp_lib
  implicit none
  integer, parameter :: n = 10000
  integer :: a(n), who(n), i, bad, cnt, nthr
  logical :: seen(0:63)
  a = -1
  who = -1
  cnt = 0
  !$omp target parallel do map(tofrom: a, who, cnt)
  do i = 1, n
    a(i) = 3 * i + 1
    who(i) = omp_get_thread_num()
    !$omp atomic
    cnt = cnt + 1
  end do
  bad = 0
  seen = .false.
  do i = 1, n
    if (a(i) /= 3 * i + 1) bad = bad + 1
    if (who(i) >= 0 .and. who(i) <= 63) seen(who(i)) = .true.
  end do
  nthr = count(seen)
  print '(a,i0,a,i0,a,i0,a,i0)', 'n=', n, ' bad=', bad, ' count=', cnt, ' threads=', nthr
end program main
