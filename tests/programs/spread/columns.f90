! Data entered on the default device and `nowait` tasks that use it, as Fortran programs
! write them (docs/cluster.md, "Spreading"):
! - tasks that each update one column of `b`, entered whole, while naming all of it, with
!   `depend` only on their own column (legal: the columns are disjoint);
! - chains of tasks that each update one column of `a`, the columns entered one by one.
! Under LIBOMPTARGET_SPREAD=1 the entered data goes along with the tasks that move; the sums
! must be those of the unmodified program.
program columns
  implicit none
  integer, parameter :: n = 512, w = 6, rounds = 3
  real(8) :: a(n, w), b(n, w)
  integer :: i, j, r

  do j = 1, w
    do i = 1, n
      a(i, j) = mod(3 * j + i, 11)
      b(i, j) = mod(j + i, 13)
    end do
  end do
  !$omp target enter data map(to: b)
  do j = 1, w
    !$omp target enter data map(to: a(:, j))
  end do
  !$omp parallel
  !$omp single
  do r = 1, rounds
    do j = 1, w
      !$omp target nowait depend(inout: b(1, j)) map(tofrom: b)
      do i = 1, n
        b(i, j) = b(i, j) * 0.5d0 + r * j
      end do
      !$omp end target
    end do
    do j = 1, w
      !$omp target nowait depend(inout: a(1, j)) map(tofrom: a(:, j))
      do i = 1, n
        a(i, j) = a(i, j) * 0.5d0 + r + j * 1d-3
      end do
      !$omp end target
    end do
  end do
  !$omp end single
  !$omp end parallel
  !$omp target exit data map(from: b)
  do j = 1, w
    !$omp target exit data map(from: a(:, j))
  end do
  do j = 1, w
    print '(a, i0, a, es17.9, a, es17.9)', 'column ', j, ': ', sum(b(:, j) * [(1 + mod(i, 5), i = 1, n)]), &
      ' ', sum(a(:, j) * [(1 + mod(i, 3), i = 1, n)])
  end do
end program columns
