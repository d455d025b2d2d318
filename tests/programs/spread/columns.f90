! Data entered on the default device and `nowait` tasks that use it, as Fortran programs
! write them (docs/cluster.md, "Spreading"):
! - tasks that each update one column of `b`, entered whole, while naming all of it, with
!   `depend` only on their own column (legal: the columns are disjoint);
! - chains of tasks that each update one column of `a`, the columns entered one by one.
! A long task keeps the default device busy meanwhile (entered data leaves only a device
! busier than the one it goes to). Under LIBOMPTARGET_SPREAD=1 the entered data goes along
! with the tasks that move; the sums must be those of the unmodified program.
program columns
  use omp_lib
  use iso_c_binding, only: c_loc
  implicit none
  integer, parameter :: n = 512, w = 6, rounds = 3
  real(8) :: a(n, w), b(n, w)
  real(8), target :: anchor(1)
  real(8) :: pin(1), x
  integer :: i, j, r, dev
  integer(8) :: k

  do j = 1, w
    do i = 1, n
      a(i, j) = mod(3 * j + i, 11)
      b(i, j) = mod(j + i, 13)
    end do
  end do
  pin(1) = 0.5d0
  anchor(1) = 0
  !$omp target enter data map(to: b, pin)
  do j = 1, w
    !$omp target enter data map(to: a(:, j))
  end do
  !$omp parallel
  !$omp single
  !$omp target nowait map(present, to: pin) map(tofrom: anchor)
  x = pin(1)
  do k = 1, 60000000_8
    x = x * 0.999999d0 + 1d-9 * mod(k, 11_8)
  end do
  anchor(1) = x
  !$omp end target
  ! (Until it is under way there; at once when there is no device.)
  dev = omp_get_default_device()
  if (dev < omp_get_num_devices()) then
    do while (omp_target_is_present(c_loc(anchor), dev) == 0)
    end do
  end if
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
  !$omp target exit data map(from: b) map(release: pin)
  do j = 1, w
    !$omp target exit data map(from: a(:, j))
  end do
  do j = 1, w
    print '(a, i0, a, es17.9, a, es17.9)', 'column ', j, ': ', sum(b(:, j) * [(1 + mod(i, 5), i = 1, n)]), &
      ' ', sum(a(:, j) * [(1 + mod(i, 3), i = 1, n)])
  end do
  print '(a, es17.9)', 'anchor: ', anchor(1)
end program columns
