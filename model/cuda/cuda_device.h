/* model/cuda/cuda_device.h - is there a usable CUDA GPU? Safe to call on a machine without one. */
#ifndef FUSEDGPT_CUDA_DEVICE_H
#define FUSEDGPT_CUDA_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices; 0 with the reason in why (ERR_LEN bytes) when there is none or no driver. */
int cuda_device_count(char *why);

/* Starts (on = 1) or stops the range a profiler started with --profile-from-start off records
 * (Nsight Compute: `ncu --profile-from-start off`); see dev/profile/step_profile.sh. */
void cuda_profiler_range(int on);

#ifdef __cplusplus
}
#endif

#endif
