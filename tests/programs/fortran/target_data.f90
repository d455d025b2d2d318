! `target data`, `target enter data`, `target update` and `target exit data`.
! Expected: data=<sum 2*i> enter=<sum (i+10)> update=<sum (i+10)*2+1> host_copy_untouched=T
program main
  implicit none
  integer, parameter :: n = 1000
  integer :: a(n), b(n), i
  integer(8) :: s1, s2, s3
  logical :: untouched
  do i = 1, n
    a(i) = i
    b(i) = i
  end do
  ! target data: the region doubles a on the device; copied back at the end of the data region.
  !$omp target data map(tofrom: a)
  !$omp target
  do i = 1, n
    a(i) = 2 * a(i)
  end do
  !$omp end target
  !$omp end target data
  s1 = sum(int(a, 8))
  ! enter data: b lives on the device until exit data.
  !$omp target enter data map(to: b)
  !$omp target
  do i = 1, n
    b(i) = b(i) + 10
  end do
  !$omp end target
  ! Host copy not yet updated.
  untouched = all(b == [(i, i = 1, n)])
  !$omp target update from(b)
  s2 = sum(int(b, 8))
  ! Change the host copy, push it, modify on the device, then exit data with from.
  b = 2 * b
  !$omp target update to(b)
  !$omp target
  do i = 1, n
    b(i) = b(i) + 1
  end do
  !$omp end target
  !$omp target exit data map(from: b)
  s3 = sum(int(b, 8))
  print '(a,i0,a,i0,a,i0,a,l1)', 'data=', s1, ' enter=', s2, ' update=', s3, ' host_copy_untouched=', untouched
end program main
