! A `declare target to` module array: initialized on the host, pushed with `target update`,
! read and written by a target region, fetched back.
! Expected: dev_sum=<sum over i of tbl(i)=i*i> after=<sum of i*i+5>
module tables
  implicit none
  integer, parameter :: m = 100
  integer :: tbl(m)
  !$omp declare target to(tbl)
end module tables

program main
  use tables
  implicit none
  integer :: i
  integer(8) :: dev_sum
  do i = 1, m
    tbl(i) = i * i
  end do
  !$omp target update to(tbl)
  dev_sum = 0
  !$omp target map(tofrom: dev_sum)
  do i = 1, m
    dev_sum = dev_sum + tbl(i)
    tbl(i) = tbl(i) + 5
  end do
  !$omp end target
  tbl = 0
  !$omp target update from(tbl)
  print '(a,i0,a,i0)', 'dev_sum=', dev_sum, ' after=', sum(int(tbl, 8))
end program main
