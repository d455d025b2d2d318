! A `device_type(nohost)` function called from a target region.
! Expected: f=<7*7+3> g=<sum of f(1..10)>
module funcs
  implicit none
  !$omp declare target to(f) device_type(nohost)
contains
  integer function f(x)
    integer, intent(in) :: x
    f = x * x + 3
  end function f
end module funcs

program main
  use funcs
  implicit none
  integer :: r, g, i
  r = 0
  g = 0
  !$omp target map(tofrom: r, g)
  r = f(7)
  do i = 1, 10
    g = g + f(i)
  end do
  !$omp end target
  print '(a,i0,a,i0)', 'f=', r, ' g=', g
end program main
