! The host changes a after it was copied to the device and never updates the device.
program stale
  implicit none
  integer, parameter :: n = 4096
  real(8) :: a(n), s
  integer :: i
  a = 1
  s = 0
  !$omp target enter data map(to: a)
  a = 2
  !$omp target map(tofrom: s)
  do i = 1, n
    s = s + a(i)
  end do
  !$omp end target
  !$omp target exit data map(release: a)
  print '(a,f0.0)', 's=', s
end program
