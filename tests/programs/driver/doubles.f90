! Fortran offload test: a target region filling an array, summed on the host.
program doubles
  implicit none
  integer :: a(100), i, s
  !$omp target map(from:a)
  do i = 1, 100
    a(i) = i*2
  end do
  !$omp end target
  s = sum(a)
  print '(A,I0)', 'doubles sum=', s
end program doubles
