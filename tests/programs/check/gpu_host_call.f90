! A kernel that, when asked (any argument), writes its sum to a file: Fortran I/O statements
! call flang's I/O runtime, which is not built for GPUs. LIBOMPTARGET_CHECK=gpu names the
! calls; without the argument nothing is said.
program gpu_host_call
  implicit none
  integer :: i, u
  logical :: verbose
  real(8) :: s
  verbose = command_argument_count() > 0
  s = 0
  !$omp target map(tofrom: s) map(to: verbose)
  do i = 1, 100
    s = s + 1.0d0 / i
  end do
  if (verbose) then
    open (newunit=u, file='/dev/null')
    write (u, *) s
    close (u)
  end if
  !$omp end target
  print '(A,F8.4)', 's=', s
end program gpu_host_call
