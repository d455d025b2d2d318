long device_sum(int n);
long device_scale(int n, int k);
