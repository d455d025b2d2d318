! c is mapped from: its device copy starts undefined, and the kernel adds to it.
program uninit
  implicit none
  integer, parameter :: n = 4096
  real(8) :: c(n)
  integer :: i
  c = 1
  !$omp target map(from: c)
  do i = 1, n
    c(i) = c(i) + 1
  end do
  !$omp end target
  print '(a,f0.0)', 'c(1)=', c(1)
end program
