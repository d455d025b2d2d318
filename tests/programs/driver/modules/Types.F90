! Fortran BabelStream's layout in miniature: Types <- Stream <- main, plus a submodule.
module types_mod
  implicit none
  integer, parameter :: dp = kind(1.0d0)
  integer, parameter :: n = 1024
end module types_mod
