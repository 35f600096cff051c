/* Target of bench/profile_overhead.py. Reads commands on stdin, answers one line each on stdout:
 *   tight N          N back-to-back cudaLaunchKernel calls; prints the elapsed nanoseconds
 *   sync N           N back-to-back cudaDeviceSynchronize calls (uprobe + uretprobe); prints nanoseconds
 *   paced N WORK     N iterations of one cudaLaunchKernel then WORK loop steps of the program's own work
 *                    (no clock reads: a fixed amount of work, calibrated by the bench to 10 us a period, i.e.
 *                    100k calls/s); prints the elapsed nanoseconds, so whatever a probe adds to a call
 *                    lengthens the run by that much (the slowdown)
 * Each answer is "ELAPSED_NS CPU_NS": wall time, then the process's CPU time (user + system, the uprobe traps
 * included) over the same command; the CPU time is far less sensitive to other work on a shared machine.
 * Without a driver each call returns an error at once, so the time measured is the call path and the probes.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>

static long long clock_ns(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return now.tv_sec * 1000000000LL + now.tv_nsec;
}

__attribute__((noinline)) static void launch(void) {
    dim3 grid = {1, 1, 1};
    dim3 block = {32, 1, 1};
    cudaLaunchKernel((const void *)launch, grid, block, NULL, 0, NULL);
}

int main(void) {
    char command[16];
    long long count, period_ns; /* paced: loop steps of work */
    printf("ready\n");
    fflush(stdout);
    while (scanf("%15s %lld", command, &count) == 2) {
        long long start = clock_ns(CLOCK_MONOTONIC), cpu_start = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        if (command[0] == 't') {
            for (long long i = 0; i < count; i++)
                launch();
        } else if (command[0] == 's') {
            for (long long i = 0; i < count; i++)
                cudaDeviceSynchronize();
        } else {
            if (scanf("%lld", &period_ns) != 1)
                return 2;
            for (long long i = 0; i < count; i++) {
                launch();
                for (volatile long long step = 0; step < period_ns; step++)
                    ;
            }
        }
        printf("%lld %lld\n", clock_ns(CLOCK_MONOTONIC) - start, clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_start);
        fflush(stdout);
    }
    return 0;
}
