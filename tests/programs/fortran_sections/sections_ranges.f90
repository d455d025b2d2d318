! The rewrite ompcc suggests for flang 20-22: each scalar subscript before the last as a range
! (`x(2:n-1, i:i, j)`), which flang lowers right by itself. ompcc must build this without a
! word; it runs right even without ompcc's correction. Prints `<case>=<wrong elements>`.
program sections_ranges
  implicit none
  integer, parameter :: n = 10, m = 3
  integer, allocatable :: a(:,:,:)
  integer :: x(n, n, m), want(n, n, m), i, j
  allocate(a(n, n, m))
  a = -1
  x = -1
  do j = 1, m
    do i = 1, n
      !$omp target data map(from: a(2:n-1, i:i, j))
      !$omp target map(alloc: a(2:n-1, i:i, j))
      a(2:n-1, i, j) = i + 100 * j
      !$omp end target
      !$omp end target data
      call fill(x, i, j)
    end do
  end do
  want = -1
  do j = 1, m
    do i = 1, n
      want(2:n-1, i, j) = i + 100 * j
    end do
  end do
  print '(a,i0)', 'allocatable=', count(a /= want)
  print '(a,i0)', 'assumed_shape=', count(x /= want)
contains
  ! An assumed-shape dummy argument: reached through a descriptor too.
  subroutine fill(y, i, j)
    integer :: y(:,:,:), i, j
    !$omp target map(tofrom: y(2:size(y, 1)-1, i:i, j))
    y(2:size(y, 1)-1, i, j) = i + 100 * j
    !$omp end target
  end subroutine fill
end program sections_ranges
