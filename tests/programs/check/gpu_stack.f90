! A kernel that keeps a 64 KiB array on its stack (a local of a declare-target subroutine):
! it runs on the CPU devices, but a GPU thread has 1 KiB of stack by default.
! LIBOMPTARGET_CHECK=gpu says so. With an argument the array is 32 elements: nothing to say.
module work
  implicit none
contains
  subroutine accumulate(s, n)
    !$omp declare target
    real(8), intent(inout) :: s
    integer, intent(in) :: n
    real(8) :: w(n)
    integer :: i
    do i = 1, n
      w(i) = i
    end do
    do i = 1, n
      s = s + w(mod(i * 7919, n) + 1)
    end do
  end subroutine
end module

program gpu_stack
  use work
  implicit none
  real(8) :: s
  integer :: n
  n = 8192
  if (command_argument_count() > 0) n = 32
  s = 0
  !$omp target map(tofrom: s) map(to: n)
  call accumulate(s, n)
  !$omp end target
  print '(a,f0.1)', 's=', s
end program
