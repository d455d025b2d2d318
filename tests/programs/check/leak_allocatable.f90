! An allocatable array (4096 doubles, 32 KiB) is mapped with enter data and never unmapped:
! the leak is the data's 32 KiB, not its descriptor's bytes.
program leak_allocatable
  implicit none
  integer, parameter :: n = 4096
  real(8), allocatable :: d(:)
  real(8) :: s
  integer :: i
  allocate(d(n))
  d = 1
  s = 0
  !$omp target enter data map(to: d)
  !$omp target map(tofrom: s)
  do i = 1, n
    s = s + d(i)
  end do
  !$omp end target
  print '(a,f0.0)', 's=', s
end program
