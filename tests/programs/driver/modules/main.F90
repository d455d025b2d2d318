program main
  use stream_mod
  use types_mod
  implicit none
  real(dp) :: a(n), b(n), c(n)
  a = 0; b = 1; c = 2
  call triad(a, b, c, 3.0_dp)
  print '(a,f0.1)', 'stream triad sum=', sum(a)
end program main
