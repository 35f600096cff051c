/* Test target for `aiops profile`: named functions call the CUDA runtime in known proportions per round,
 * feed_launches 3 x cudaLaunchKernel, copy_inputs 2 x cudaMemcpy, wait_gpu 1 x cudaDeviceSynchronize.
 * Built by tests/profile/test_profile_*.py with gcc -O0 -fno-omit-frame-pointer against libcudart. Without
 * a driver every call returns an error at once; the uprobes fire all the same. Runs at most argv[1] rounds
 * (default 20000) with argv[2] microseconds of sleep per round (default 500) and argv[3] microseconds of
 * on-CPU work in prepare_batch per round (default 0: a stand-in for a data loader), then exits. With argv[4]
 * "wait" it reads one line from stdin before the first round (a test starts it once the profiler attached).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char host_buffer[64];

__attribute__((noinline)) void feed_launches(void) {
    dim3 grid = {1, 1, 1};
    dim3 block = {32, 1, 1};
    for (int i = 0; i < 3; i++)
        cudaLaunchKernel((const void *)feed_launches, grid, block, NULL, 0, NULL);
}

__attribute__((noinline)) void copy_inputs(void) {
    for (int i = 0; i < 2; i++)
        cudaMemcpy(host_buffer, host_buffer + 32, 16, cudaMemcpyHostToHost);
}

__attribute__((noinline)) void wait_gpu(void) { cudaDeviceSynchronize(); }

static long now_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000L + now.tv_nsec / 1000;
}

__attribute__((noinline)) void prepare_batch(long spin_us) {
    long until = now_us() + spin_us;
    while (now_us() < until)
        ;
}

__attribute__((noinline)) void train_step(void) {
    feed_launches();
    copy_inputs();
    wait_gpu();
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    long sleep_us = argc > 2 ? atol(argv[2]) : 500;
    long spin_us = argc > 3 ? atol(argv[3]) : 0;
    printf("ready\n");
    fflush(stdout);
    if (argc > 4 && strcmp(argv[4], "wait") == 0) {
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 1;
    }
    for (long round = 0; round < rounds; round++) {
        if (spin_us > 0)
            prepare_batch(spin_us);
        train_step();
        if (sleep_us > 0)
            usleep((useconds_t)sleep_us);
    }
    return 0;
}
