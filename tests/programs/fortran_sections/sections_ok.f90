! Sections that flang 19 and 22 both start at the right element: ompcc must build this program
! without a word, and every count printed (`<case>=<wrong elements>`) must be 0.
program sections_ok
  implicit none
  integer, parameter :: n = 12, m = 4
  integer, allocatable :: v(:), a(:,:,:)
  integer :: e(n, n, m), want(n, n, m), one(1, 5), i, j, k
  allocate(v(n), a(n, n, m))

  ! 1-D sections of an allocatable array.
  v = -1
  !$omp target data map(from: v(3:n-2))
  !$omp target map(alloc: v(3:n-2))
  v(3:n-2) = 5
  !$omp end target
  !$omp end target data
  print '(a,i0)', 'vector=', count(v(3:n-2) /= 5) + count(v(1:2) /= -1) + count(v(n-1:n) /= -1)

  ! Explicit-shape arrays: no descriptor, so no bounds arithmetic to get wrong.
  e = -1
  do j = 1, m
    do i = 1, n
      !$omp target map(tofrom: e(3:n-2, i, j))
      e(3:n-2, i, j) = i + 100 * j
      !$omp end target
    end do
  end do
  want = -1
  do j = 1, m
    do i = 1, n
      want(3:n-2, i, j) = i + 100 * j
    end do
  end do
  print '(a,i0)', 'explicit=', count(e /= want)

  ! Whole columns of an explicit-shape array: contiguous.
  e = -1
  !$omp target map(tofrom: e(:, 2:3, 2))
  e(:, 2:3, 2) = 4
  !$omp end target
  want = -1
  want(:, 2:3, 2) = 4
  print '(a,i0)', 'columns=', count(e /= want)

  ! A row of an array with one row: contiguous.
  one = 1
  !$omp target map(tofrom: one(1, 2:4))
  one(1, 2:4) = 6
  !$omp end target
  print '(a,i0)', 'one_row=', count(one(1, :) /= [1, 6, 6, 6, 1])

  ! Later subscripts at their lower bounds, and the whole array.
  a = 1
  !$omp target map(tofrom: a(2:n-1, 1, 1))
  a(2:n-1, 1, 1) = 9
  !$omp end target
  !$omp target map(tofrom: a)
  do k = 1, m
    a(1, 1, k) = a(1, 1, k) + k
  end do
  !$omp end target
  want = 1
  want(2:n-1, 1, 1) = 9
  do k = 1, m
    want(1, 1, k) = 1 + k
  end do
  print '(a,i0)', 'leading=', count(a /= want)
end program sections_ok
