! A procedure passed into a target region: without declare target on cb, flang turns its
! address into undef on the device (crash); ompcc reports it. With -DMARK it works.
integer function cb(x)
#ifdef MARK
  !$omp declare target
#endif
  integer :: x
  cb = x + 110
end function
integer function apply(f, x)
  !$omp declare target
  interface
    integer function f(x)
      integer :: x
    end function
  end interface
  integer :: x
  apply = f(x)
end function
program p
  interface
    integer function cb(x)
      integer :: x
    end function
    integer function apply(f, x)
      interface
        integer function f(x)
          integer :: x
        end function
      end interface
      integer :: x
    end function
  end interface
  integer :: x
  x = 1
  !$omp target map(tofrom: x)
  x = apply(cb, x)
  !$omp end target
  print '(a,i0)', 'x=', x
end program
