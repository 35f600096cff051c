/* Target of bench/rank_timing.py: one rank linked against the real libnccl (nvidia-nccl-cu13) and libcudart
 * that makes one probed call per argv[1] nanoseconds of its own CPU work (100000: 10k calls/s with a CPU to
 * itself), cycling ncclAllReduce, ncclAllGather, ncclGroupEnd (after ncclGroupStart, not probed) and
 * cudaStreamSynchronize. Without a GPU every call fails at once; the uprobes fire all the same.
 * It prints "ready", then every 100 ms: wall ns, its own CPU ns (CLOCK_PROCESS_CPUTIME_ID), probed calls made.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static float buffer[16];
static volatile unsigned long sink;

static long long ns(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return now.tv_sec * 1000000000LL + now.tv_nsec;
}

__attribute__((noinline)) static void work(long loops) {
    for (long i = 0; i < loops; i++)
        sink += i;
}

int main(int argc, char **argv) {
    long work_ns = argc > 1 ? atol(argv[1]) : 100000;
    long long started = ns(CLOCK_PROCESS_CPUTIME_ID);
    work(20000000);
    double loops_per_ns = 20000000.0 / (double)(ns(CLOCK_PROCESS_CPUTIME_ID) - started);
    long loops = (long)(loops_per_ns * work_ns);
    printf("ready\n");
    fflush(stdout);
    long long calls = 0, last = ns(CLOCK_MONOTONIC);
    for (;;) {
        work(loops);
        switch (calls & 3) {
        case 0: ncclAllReduce(buffer, buffer, 1024, ncclFloat32, ncclSum, NULL, NULL); break;
        case 1: ncclAllGather(buffer, buffer, 1024, ncclFloat32, NULL, NULL); break;
        case 2: ncclGroupStart(); ncclGroupEnd(); break;
        default: cudaStreamSynchronize(NULL);
        }
        calls++;
        long long now = ns(CLOCK_MONOTONIC);
        if (now - last >= 100000000LL) {
            last = now;
            printf("%lld %lld %lld\n", now, ns(CLOCK_PROCESS_CPUTIME_ID), calls);
            fflush(stdout);
        }
    }
}
