! omp_get_thread_num, omp_get_num_teams and omp_is_initial_device inside target regions, and
! omp_is_initial_device on the libomp worker threads of a `target parallel`.
! Expected: host_initial=T dev_initial=F tnum=0 nteams=1 par_initial_count=0 par_threads=<team size>
program main
  use omp_lib
  implicit none
  logical :: host_init, dev_init
  integer :: tnum, nteams, par_init, par_thr
  host_init = omp_is_initial_device()
  dev_init = .true.
  tnum = -1
  nteams = -1
  par_init = 0
  par_thr = 0
  !$omp target map(tofrom: dev_init, tnum, nteams)
  dev_init = omp_is_initial_device()
  tnum = omp_get_thread_num()
  nteams = omp_get_num_teams()
  !$omp end target
  !$omp target parallel map(tofrom: par_init, par_thr)
  if (omp_is_initial_device()) then
    !$omp atomic
    par_init = par_init + 1
  end if
  !$omp atomic
  par_thr = par_thr + 1
  !$omp end target parallel
  print '(a,l1,a,l1,a,i0,a,i0,a,i0,a,i0)', 'host_initial=', host_init, ' dev_initial=', dev_init, &
    ' tnum=', tnum, ' nteams=', nteams, ' par_initial_count=', par_init, ' par_threads=', par_thr
end program main
