! Fortran I/O to a file and recursion in device code.
module tree
contains
  recursive integer function depth(n) result(d)
    !$omp declare target
    integer, intent(in) :: n
    if (n <= 1) then
      d = 1
    else
      d = 1 + depth(n / 2)
    end if
  end function
end module

program write_file
  use tree
  integer :: x(4), i
  !$omp target map(from: x)
  do i = 1, 4
    x(i) = depth(i * 8)
  end do
  open(10, file='x.txt')
  write(10, *) x
  close(10)
  !$omp end target
  print *, x
end program
