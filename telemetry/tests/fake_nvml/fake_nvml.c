/*
 * A fake libnvidia-ml.so for canary-telemetry's tests: just enough of the NVML C API, with
 * scripted values, for nvml-wrapper to load it through its real dlopen/dlsym path.
 *
 * nvml-wrapper-sys resolves every symbol it knows with dlsym when the library is opened and
 * keeps each as a Result; a missing symbol becomes NvmlError::FailedToLoadSymbol when (and only
 * when) its wrapper is called, except nvmlShutdown, which Drop calls unchecked (it would panic).
 * Build with -DNO_PROCESS_UTIL to leave nvmlDeviceGetProcessUtilization out.
 *
 * Values: 2 GPUs (FAKE_NVML_GPUS overrides), utilization 73% (FAKE_NVML_UTIL overrides) / 41%, 80 GiB total and
 * 12345678912 B used, power 215123 mW, energy counter starting at 1000000 mJ and growing by
 * 5000 mJ per read, 64 C, SM 1980 MHz, memory 2619 MHz, throttle reasons 0x4 (SW power cap),
 * PCIe TX 1000 KB/s and RX 2000 KB/s, per-process samples since the last query: one of pid 1
 * (99%, 99%) and three of pid FAKE_NVML_PID (default 4242), SM 40/55/70% and memory 10/22/34%
 * (means 55% and 22%).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

struct fake_device { unsigned int index; };
typedef struct fake_device *nvmlDevice_t;

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

static struct fake_device devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static unsigned long long energy_reads = 0;

static unsigned int gpu_count(void) {
    const char *s = getenv("FAKE_NVML_GPUS");
    unsigned int n = s ? (unsigned int)atoi(s) : 2;
    return n > 8 ? 8 : n;
}

/* FAKE_NVML_HANG set: init never returns, as with a wedged driver (a GPU fallen off the bus). */
nvmlReturn_t nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_HANG")) {
        for (;;) pause();
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake nvml error"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "%s", "580.00-fake");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    *count = gpu_count();
    return NVML_SUCCESS;
}

/* Built with -DLOSE_GPU_1_AFTER=N: GPU 1's handle is refused from its (N+1)th lookup on, as
 * a GPU fallen off the bus is. */
#ifdef LOSE_GPU_1_AFTER
#define NVML_ERROR_GPU_IS_LOST 15
static unsigned int gpu1_lookups = 0;
#endif

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
#ifdef LOSE_GPU_1_AFTER
    if (index == 1 && ++gpu1_lookups > LOSE_GPU_1_AFTER) return NVML_ERROR_GPU_IS_LOST;
#endif
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    (void)d;
    snprintf(name, length, "%s", "Fake NVIDIA H100 80GB HBM3");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    snprintf(uuid, length, "GPU-fake-%04u", d->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    (void)d;
    const char *g = getenv("FAKE_NVML_UTIL");
    u->gpu = g ? (unsigned int)atoi(g) : 73;
    u->memory = 41;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    (void)d;
    m->total = 80ULL << 30;
    m->used = 12345678912ULL;
    m->reserved = 0;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    (void)d;
    *mw = 215123;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    (void)d;
    *mj = 1000000ULL + 5000ULL * __atomic_fetch_add(&energy_reads, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t) {
    (void)d;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *t = 64;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    (void)d;
    switch (type) {
    case 1: *mhz = 1980; return NVML_SUCCESS; /* NVML_CLOCK_SM */
    case 2: *mhz = 2619; return NVML_SUCCESS; /* NVML_CLOCK_MEM */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    (void)d;
    *r = 0x4ULL; /* nvmlClocksThrottleReasonSwPowerCap */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kbps) {
    (void)d;
    *kbps = counter == 0 ? 1000 : 2000; /* TX_BYTES = 0, RX_BYTES = 1 */
    return NVML_SUCCESS;
}

#ifndef NO_PROCESS_UTIL
/* What a real driver returns: every sample of every process since last_seen, oldest first,
 * one per driver period. Here another process's (pid 1, 99 % and 99 %) and then three of
 * FAKE_NVML_PID's: SM 40, 55, 70 % and memory 10, 22, 34 %, means 55 and 22. */
#define FAKE_PROC_SAMPLES 4
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s,
                                             unsigned int *count, unsigned long long last_seen) {
    static const unsigned int sm[FAKE_PROC_SAMPLES] = {99, 40, 55, 70};
    static const unsigned int mem[FAKE_PROC_SAMPLES] = {99, 10, 22, 34};
    (void)d;
    const char *p = getenv("FAKE_NVML_PID");
    if (s == NULL) {
        *count = FAKE_PROC_SAMPLES;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (*count < FAKE_PROC_SAMPLES) {
        *count = FAKE_PROC_SAMPLES;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memset(s, 0, FAKE_PROC_SAMPLES * sizeof(*s));
    for (unsigned int i = 0; i < FAKE_PROC_SAMPLES; i++) {
        s[i].pid = i == 0 ? 1 : (p ? (unsigned int)atoi(p) : 4242);
        s[i].timeStamp = last_seen + 1000 * (i + 1);
        s[i].smUtil = sm[i];
        s[i].memUtil = mem[i];
    }
    *count = FAKE_PROC_SAMPLES;
    return NVML_SUCCESS;
}
#endif
