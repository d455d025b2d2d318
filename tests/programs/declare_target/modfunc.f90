! A module function called from a target region (implicitly on the device), an explicit
! host+nohost merge, and a 3-deep chain.
! Expected: r=<(7*7+3)> s=<leaf chain> t=<merged>
module funcs
  implicit none
contains
  integer function sq3(x)
    integer, intent(in) :: x
    sq3 = x * x + 3
  end function sq3
end module funcs

integer function leaf(x)
  integer :: x
  leaf = x + 100
end function
integer function mid(x)
  integer :: x, leaf
  mid = leaf(x) * 2
end function
integer function top(x)
  integer :: x, mid
  top = mid(x) + 1
end function
subroutine twice(x, y)
  !$omp declare target enter(twice) device_type(host)
  !$omp declare target enter(twice) device_type(nohost)
  integer :: x, y
  y = 2 * x
end subroutine

program main
  use funcs
  implicit none
  integer :: r, s, t, top
  r = 0
  s = 0
  t = 0
  !$omp target map(tofrom: r, s, t)
  r = sq3(7)
  s = top(1)
  call twice(21, t)
  !$omp end target
  print '(a,i0,a,i0,a,i0)', 'r=', r, ' s=', s, ' t=', t
end program main
