! Sections that are not contiguous in memory: one row across three columns. OpenMP requires a
! mapped section to be contiguous; flang maps three elements in a row from b(2,1) instead, so
! ompcc refuses both clauses and names the contiguous section that covers each (`b(:,1:3)`).
! Prints `<case>=<wrong elements>`.
program noncontiguous
  implicit none
  integer, allocatable :: b(:,:)
  integer :: e(4, 5), want(4, 5)
  allocate(b(4, 5))
  b = 1
  e = 1
  !$omp target map(tofrom: b(2, 1:3))
  b(2, 1:3) = 7
  !$omp end target
  !$omp target map(tofrom: e(2, 1:3))
  e(2, 1:3) = 7
  !$omp end target
  want = 1
  want(2, 1:3) = 7
  print '(a,i0)', 'allocatable=', count(b /= want)
  print '(a,i0)', 'explicit=', count(e /= want)
end program noncontiguous
