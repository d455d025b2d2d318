! Two `!$omp do` loops in one `target parallel`; the second reads, in reverse order, what the
! first wrote. Flang's device code has no barrier between them, the runtime must add it.
! Expected: wrong=0
program main
  implicit none
  integer, parameter :: n = 200000
  integer :: a(n), b(n), i, wrong
  a = 0
  b = 0
  !$omp target parallel map(tofrom: a, b)
  !$omp do
  do i = 1, n
    a(i) = i
  end do
  !$omp end do
  !$omp do
  do i = 1, n
    b(i) = a(n + 1 - i)
  end do
  !$omp end do
  !$omp end target parallel
  wrong = 0
  do i = 1, n
    if (b(i) /= n + 1 - i) wrong = wrong + 1
  end do
  print '(a,i0)', 'wrong=', wrong
end program main
