! A scalar subscript in a section of an assumed-shape array: flang 22 starts it at the wrong
! element, and cannot read back its own HLFIR for this program, so ompcc cannot correct it and
! must stop, suggesting `y(2:9,i:i,j)`.
subroutine fill(y, i, j)
  integer :: y(:,:,:), i, j
  !$omp target map(tofrom: y(2:9, i, j))
  y(2:9, i, j) = i + 100 * j
  !$omp end target
end subroutine fill
