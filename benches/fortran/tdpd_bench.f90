! Benchmark: the same loops as `target teams distribute parallel do` (device = host CPU, through
! the CPU device runtime) and as a plain host `parallel do`, in one binary and one run. Arrays are
! made resident with `target enter data` first, so the timings compare loop execution (and the
! kernel launch, which shows on small arrays), not host-to-device copies.
! Timing: device and host batches alternate (a batch of device loops, then the same number of host
! loops, ROUNDS times); each side's time is its fastest batch, per loop. Alternating gives both
! sides the same machine conditions (other processes, clock, caches), and the fastest batch
! leaves out batches that another process interrupted, which on a shared machine decide a
! whole-run average.
! Kernels: triad a = b + s*c; reduction sum(a*b); 5-point stencil on a 2-D array; one exp per
! element. Usage: tdpd_bench N   (N elements per array; the 2-D array is about sqrt(N)^2).
! Prints: <kernel> device_s=<seconds per rep> host_s=<seconds per rep> check=<0 when results agree>
program tdpd_bench
  use omp_lib
  implicit none
  integer :: n, nx, reps, i, r, batch, rounds, k
  real(8), allocatable :: a(:), b(:), c(:), ah(:), u(:,:), v(:,:), vh(:,:)
  real(8) :: t0, tdev, thost, s, sh
  character(len=32) :: arg

  n = 8000000
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read(arg, *) n
  end if
  n = max(n, 1024)
  nx = int(sqrt(real(n, 8)))
  ! About 40M element updates per measurement, whatever the size.
  reps = max(3, 40000000 / n)
  batch = max(1, reps / 100)
  rounds = max(3, reps / batch)

  allocate(a(n), b(n), c(n), ah(n), u(nx, nx), v(nx, nx), vh(nx, nx))
  do i = 1, n
    b(i) = 1.0d0 + mod(i, 1000) * 1.0d-3
    c(i) = 2.0d0 - mod(i, 777) * 1.0d-3
  end do
  do i = 1, nx
    u(:, i) = [(sin(0.001d0 * r * i), r = 1, nx)]
  end do
  a = 0
  ah = 0
  v = 0
  vh = 0
  !$omp target enter data map(to: a, b, c, u, v)

  ! triad
  call dev_triad()
  call host_triad()
  tdev = huge(tdev)
  thost = huge(thost)
  do k = 1, rounds
    t0 = omp_get_wtime()
    do r = 1, batch
      call dev_triad()
    end do
    tdev = min(tdev, (omp_get_wtime() - t0) / batch)
    t0 = omp_get_wtime()
    do r = 1, batch
      call host_triad()
    end do
    thost = min(thost, (omp_get_wtime() - t0) / batch)
  end do
  !$omp target update from(a)
  print '(a,es10.3,a,es10.3,a,i0)', 'triad device_s=', tdev, ' host_s=', thost, ' check=', count(a /= ah)

  ! reduction: sum(a*b); results agree up to reassociation (relative 1e-12).
  call dev_dot(s)
  call host_dot(sh)
  tdev = huge(tdev)
  thost = huge(thost)
  do k = 1, rounds
    t0 = omp_get_wtime()
    do r = 1, batch
      call dev_dot(s)
    end do
    tdev = min(tdev, (omp_get_wtime() - t0) / batch)
    t0 = omp_get_wtime()
    do r = 1, batch
      call host_dot(sh)
    end do
    thost = min(thost, (omp_get_wtime() - t0) / batch)
  end do
  print '(a,es10.3,a,es10.3,a,i0)', 'dot device_s=', tdev, ' host_s=', thost, ' check=', &
    merge(0, 1, abs(s - sh) <= 1.0d-12 * abs(sh))

  ! 5-point stencil on the 2-D array
  call dev_stencil()
  call host_stencil()
  tdev = huge(tdev)
  thost = huge(thost)
  do k = 1, rounds
    t0 = omp_get_wtime()
    do r = 1, batch
      call dev_stencil()
    end do
    tdev = min(tdev, (omp_get_wtime() - t0) / batch)
    t0 = omp_get_wtime()
    do r = 1, batch
      call host_stencil()
    end do
    thost = min(thost, (omp_get_wtime() - t0) / batch)
  end do
  !$omp target update from(v)
  print '(a,es10.3,a,es10.3,a,i0)', 'stencil device_s=', tdev, ' host_s=', thost, ' check=', count(v /= vh)

  ! one exp per element (a vectorised exp may round differently: relative 1e-14)
  call dev_exp()
  call host_exp()
  tdev = huge(tdev)
  thost = huge(thost)
  do k = 1, rounds
    t0 = omp_get_wtime()
    do r = 1, batch
      call dev_exp()
    end do
    tdev = min(tdev, (omp_get_wtime() - t0) / batch)
    t0 = omp_get_wtime()
    do r = 1, batch
      call host_exp()
    end do
    thost = min(thost, (omp_get_wtime() - t0) / batch)
  end do
  !$omp target update from(a)
  print '(a,es10.3,a,es10.3,a,i0)', 'exp device_s=', tdev, ' host_s=', thost, ' check=', &
    count(abs(a - ah) > 1.0d-14 * abs(ah))
  !$omp target exit data map(delete: a, b, c, u, v)

contains

  subroutine dev_triad()
    integer :: j
    !$omp target teams distribute parallel do
    do j = 1, n
      a(j) = b(j) + 1.5d0 * c(j)
    end do
  end subroutine dev_triad

  subroutine host_triad()
    integer :: j
    !$omp parallel do
    do j = 1, n
      ah(j) = b(j) + 1.5d0 * c(j)
    end do
  end subroutine host_triad

  subroutine dev_dot(res)
    real(8), intent(out) :: res
    integer :: j
    real(8) :: acc
    acc = 0
    !$omp target teams distribute parallel do reduction(+: acc) map(tofrom: acc)
    do j = 1, n
      acc = acc + b(j) * c(j)
    end do
    res = acc
  end subroutine dev_dot

  subroutine host_dot(res)
    real(8), intent(out) :: res
    integer :: j
    real(8) :: acc
    acc = 0
    !$omp parallel do reduction(+: acc)
    do j = 1, n
      acc = acc + b(j) * c(j)
    end do
    res = acc
  end subroutine host_dot

  subroutine dev_stencil()
    integer :: i2, j
    !$omp target teams distribute parallel do private(i2)
    do j = 2, nx - 1
      do i2 = 2, nx - 1
        v(i2, j) = 0.5d0 * u(i2, j) + 0.125d0 * (u(i2 - 1, j) + u(i2 + 1, j) + u(i2, j - 1) + u(i2, j + 1))
      end do
    end do
  end subroutine dev_stencil

  subroutine host_stencil()
    integer :: i2, j
    !$omp parallel do private(i2)
    do j = 2, nx - 1
      do i2 = 2, nx - 1
        vh(i2, j) = 0.5d0 * u(i2, j) + 0.125d0 * (u(i2 - 1, j) + u(i2 + 1, j) + u(i2, j - 1) + u(i2, j + 1))
      end do
    end do
  end subroutine host_stencil

  subroutine dev_exp()
    integer :: j
    !$omp target teams distribute parallel do
    do j = 1, n
      a(j) = exp(-b(j)) * c(j)
    end do
  end subroutine dev_exp

  subroutine host_exp()
    integer :: j
    !$omp parallel do
    do j = 1, n
      ah(j) = exp(-b(j)) * c(j)
    end do
  end subroutine host_exp
end program tdpd_bench
