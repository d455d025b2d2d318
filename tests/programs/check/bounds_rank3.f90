! A kernel reads one element past a rank-3 section mapped `tofrom`: the fix keeps the map
! type (`to` would drop the results the kernel writes) and the section's three subscripts.
program bounds_rank3
  implicit none
  integer, parameter :: n = 16
  real(8) :: a(n, n, n + 1), s
  integer :: i, j, k
  a = 1
  s = 0
  !$omp target map(tofrom: a(1:n,1:n,1:n)) map(tofrom: s)
  do k = 1, n
    do j = 1, n
      do i = 1, n
        a(i, j, k) = a(i, j, k) + 1
      end do
    end do
  end do
  s = a(1, 1, n + 1)
  !$omp end target
  print '(a,f0.0)', 's=', s
end program
