! GPU fat-binary test in Fortran: a target region over a module array (declare target) and a
! module function called on the device, built for amdgcn and compared with flang 19's driver.
module gpu_data
  implicit none
  real :: weights(4) = [1.0, 2.0, 3.0, 4.0]
  !$omp declare target(weights)
contains
  real function scaled(x)
    !$omp declare target
    real, intent(in) :: x
    scaled = 2.0 * x
  end function
end module

program gpu_kernels_f
  use gpu_data
  implicit none
  integer :: i
  real :: a(100)
  !$omp target parallel do map(from: a)
  do i = 1, 100
    a(i) = scaled(real(i)) + weights(mod(i, 4) + 1)
  end do
  print '(a,f8.1)', 'gpu_kernels_f sum=', sum(a)
end program
