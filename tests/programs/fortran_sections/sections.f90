! Sections of allocatable and pointer arrays in map clauses with a scalar subscript before one
! that moves: flang 19-22 compute their first element wrongly (docs/ompcc.md, "Fortran array
! sections"); ompcc corrects flang 22's lowering and refuses flang 19's.
! Prints `<case>=<number of wrong elements>` for five cases; every count must be 0.
program sections
  implicit none
  integer, parameter :: n = 12, m = 4
  integer, allocatable :: a(:,:,:), b(:,:,:), h(:,:,:)
  integer, pointer :: p(:,:,:)
  integer, target :: store(n, n, m)
  integer :: want(n, n, m), sums(n, m), wh(0:n-1, 0:n-1, 0:1), i, j, k
  allocate(a(n, n, m), b(n, n, m), h(0:n-1, 0:n-1, 0:1))
  p => store

  ! from: each kernel writes one column section, which only the data region copies back.
  a = -1
  do j = 1, m
    do i = 1, n
      !$omp target data map(from: a(3:n-2, i, j))
      !$omp target map(alloc: a(3:n-2, i, j))
      a(3:n-2, i, j) = i + 100 * j
      !$omp end target
      !$omp end target data
    end do
  end do
  want = -1
  do j = 1, m
    do i = 1, n
      want(3:n-2, i, j) = i + 100 * j
    end do
  end do
  print '(a,i0)', 'from=', count(a /= want)

  ! to: each kernel reads one column section.
  do k = 1, n
    a(k, :, :) = k * k
  end do
  a(:, 5, 3) = 1000
  sums = -1
  do j = 1, m
    do i = 1, n
      !$omp target map(to: a(2:n-1, i, j)) map(from: k)
      k = sum(a(2:n-1, i, j))
      !$omp end target
      sums(i, j) = k
    end do
  end do
  print '(a,i0)', 'to=', count(sums /= sum(a(2:n-1, :, :), dim=1))

  ! tofrom through a pointer: the device doubles one column section.
  do k = 1, n
    store(k, :, :) = k
  end do
  do j = 1, m
    do i = 1, n, 3
      !$omp target map(tofrom: p(2:n, i, j))
      p(2:n, i, j) = 2 * p(2:n, i, j)
      !$omp end target
    end do
  end do
  do k = 1, n
    want(k, :, :) = k
  end do
  want(2:n, 1:n:3, :) = 2 * want(2:n, 1:n:3, :)
  print '(a,i0)', 'pointer=', count(store /= want)

  ! enter data, update to, a kernel, exit data from: whole columns.
  b = 7
  do j = 1, m
    do i = 1, n
      !$omp target enter data map(alloc: b(:, i, j))
      b(:, i, j) = i * j
      !$omp target update to(b(:, i, j))
      !$omp target
      b(:, i, j) = b(:, i, j) + 1
      !$omp end target
      !$omp target exit data map(from: b(:, i, j))
    end do
  end do
  do j = 1, m
    do i = 1, n
      want(:, i, j) = i * j + 1
    end do
  end do
  print '(a,i0)', 'update=', count(b /= want)

  ! Lower bounds 0: `h(2:3, i, 0)` is the first plane, `h(2:3, i, 1)` is not.
  h = -1
  do i = 0, n - 1
    !$omp target map(tofrom: h(2:3, i, 1))
    h(2:3, i, 1) = i
    !$omp end target
  end do
  wh = -1
  do i = 0, n - 1
    wh(2:3, i, 1) = i
  end do
  print '(a,i0)', 'lbound0=', count(h /= wh)
end program sections
