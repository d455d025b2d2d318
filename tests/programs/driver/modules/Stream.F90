module stream_mod
  use types_mod, only: dp, n
  implicit none
  interface
    module subroutine triad(a, b, c, s)
      real(dp), intent(inout) :: a(n)
      real(dp), intent(in) :: b(n), c(n), s
    end subroutine triad
  end interface
end module stream_mod
