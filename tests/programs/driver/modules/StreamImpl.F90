submodule (stream_mod) stream_impl
  implicit none
contains
  module subroutine triad(a, b, c, s)
    real(dp), intent(inout) :: a(n)
    real(dp), intent(in) :: b(n), c(n), s
    integer :: i
    !$omp target teams distribute parallel do map(tofrom: a) map(to: b, c)
    do i = 1, n
      a(i) = b(i) + s * c(i)
    end do
  end subroutine triad
end submodule stream_impl
