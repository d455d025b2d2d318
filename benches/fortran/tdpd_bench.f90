! Benchmark: the same loops as `target teams distribute parallel do` (device = host CPU, through
! the device runtime) and as a plain host `parallel do`. Arrays are made resident with
! `target enter data` first, so the timings compare loop execution, not host-to-device copies.
! Kernels: compute (Newton iterations), libm (math-library calls), triad (memory-bound).
! Prints: <kernel> device_s=<seconds per rep> host_s=<seconds per rep> check=<0 when results agree>
program tdpd_bench
  use omp_lib
  implicit none
  integer, parameter :: n = 8000000, reps = 20
  real(8), allocatable :: x(:), y(:), yh(:)
  real(8) :: t0, tdev, thost
  integer :: i, r

  allocate(x(n), y(n), yh(n))
  do i = 1, n
    x(i) = 1.0d0 + mod(i, 1000) * 1.0d-3
  end do
  y = 0
  yh = 0
  !$omp target enter data map(to: x, y)

  ! compute: a short per-element iteration (Newton steps for sqrt), enough arithmetic that the
  ! loop is bound by the cores rather than by memory bandwidth.
  call run_compute()
  t0 = omp_get_wtime()
  do r = 1, reps
    call run_compute()
  end do
  tdev = (omp_get_wtime() - t0) / reps
  call host_compute()
  t0 = omp_get_wtime()
  do r = 1, reps
    call host_compute()
  end do
  thost = (omp_get_wtime() - t0) / reps
  !$omp target update from(y)
  print '(a,es10.3,a,es10.3,a,i0)', 'compute device_s=', tdev, ' host_s=', thost, ' check=', &
    count(abs(y - yh) > 1.0d-12)

  ! libm: a body dominated by math-library calls, which neither side vectorizes: shows the cost
  ! of the runtime itself once the body is not a handful of instructions.
  call run_libm()
  t0 = omp_get_wtime()
  do r = 1, reps
    call run_libm()
  end do
  tdev = (omp_get_wtime() - t0) / reps
  call host_libm()
  t0 = omp_get_wtime()
  do r = 1, reps
    call host_libm()
  end do
  thost = (omp_get_wtime() - t0) / reps
  !$omp target update from(y)
  print '(a,es10.3,a,es10.3,a,i0)', 'libm device_s=', tdev, ' host_s=', thost, ' check=', &
    count(abs(y - yh) > 1.0d-12)

  ! triad: memory-bound.
  call run_triad()
  t0 = omp_get_wtime()
  do r = 1, reps
    call run_triad()
  end do
  tdev = (omp_get_wtime() - t0) / reps
  call host_triad()
  t0 = omp_get_wtime()
  do r = 1, reps
    call host_triad()
  end do
  thost = (omp_get_wtime() - t0) / reps
  !$omp target exit data map(from: y) map(delete: x)
  print '(a,es10.3,a,es10.3,a,i0)', 'triad device_s=', tdev, ' host_s=', thost, ' check=', &
    count(abs(y - yh) > 1.0d-9 * abs(yh))

contains

  subroutine run_compute()
    integer :: j, k
    real(8) :: g
    !$omp target teams distribute parallel do private(g, k)
    do j = 1, n
      g = x(j)
      do k = 1, 12
        g = 0.5d0 * (g + x(j) / g)
      end do
      y(j) = g
    end do
  end subroutine run_compute

  subroutine host_compute()
    integer :: j, k
    real(8) :: g
    !$omp parallel do private(g, k)
    do j = 1, n
      g = x(j)
      do k = 1, 12
        g = 0.5d0 * (g + x(j) / g)
      end do
      yh(j) = g
    end do
  end subroutine host_compute

  subroutine run_libm()
    integer :: j
    !$omp target teams distribute parallel do
    do j = 1, n
      y(j) = exp(-x(j)) * sin(x(j)) + log(x(j))
    end do
  end subroutine run_libm

  subroutine host_libm()
    integer :: j
    !$omp parallel do
    do j = 1, n
      yh(j) = exp(-x(j)) * sin(x(j)) + log(x(j))
    end do
  end subroutine host_libm

  subroutine run_triad()
    integer :: j
    !$omp target teams distribute parallel do
    do j = 1, n
      y(j) = y(j) + 2.0d0 * x(j)
    end do
  end subroutine run_triad

  subroutine host_triad()
    integer :: j
    !$omp parallel do
    do j = 1, n
      yh(j) = yh(j) + 2.0d0 * x(j)
    end do
  end subroutine host_triad
end program tdpd_bench
