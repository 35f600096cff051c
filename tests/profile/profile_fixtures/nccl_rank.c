/* Test target for per-rank timing: one rank of a job, linked against the real libnccl (the nvidia-nccl-cu13
 * wheel) and libcudart. It calls ncclCommInitRank(RANK, WORLD_SIZE) once, then per step: argv[2] microseconds
 * of on-CPU "compute", 2 x ncclAllReduce (1 Mi floats), 1 x ncclAllGather, ncclGroupStart/ncclGroupEnd and
 * cudaStreamSynchronize. Without a GPU every call fails at once; the uprobes fire all the same.
 * argv[1]: steps (0: until stdin closes or the process is killed), argv[2]: compute us per step,
 * argv[3]: sleep us per step. Prints "ready" once its libraries are mapped; with argv[4] "count" it prints
 * the steps done so far every 100 ms on stdout (bench/rank_timing.py's throughput). argv[5] (default 0): call
 * ncclCommInitRank again every N steps (a job that re-creates its communicator). The rank and world size are
 * RANK and WORLD_SIZE, or NCCL_ONLY_RANK and NCCL_ONLY_WORLD (a process whose rank only NCCL's arguments say).
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static float buffer[16];

static long now_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000L + now.tv_nsec / 1000;
}

__attribute__((noinline)) static void compute(long spin_us) {
    long until = now_us() + spin_us;
    while (now_us() < until)
        ;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 0;
    long compute_us = argc > 2 ? atol(argv[2]) : 100;
    long sleep_us = argc > 3 ? atol(argv[3]) : 0;
    int counting = argc > 4 && strcmp(argv[4], "count") == 0;
    long reinit_every = argc > 5 ? atol(argv[5]) : 0;
    const char *rank_env = getenv("RANK"), *world_env = getenv("WORLD_SIZE");
    if (!rank_env) {
        rank_env = getenv("NCCL_ONLY_RANK");
        world_env = getenv("NCCL_ONLY_WORLD");
    }
    int rank = rank_env ? atoi(rank_env) : 0, world = world_env ? atoi(world_env) : 1;
    ncclComm_t comm = NULL;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t init = ncclCommInitRank(&comm, world, id, rank);
    printf("ready %d\n", (int)init);
    fflush(stdout);
    long last_report = now_us();
    for (long step = 0; steps == 0 || step < steps; step++) {
        if (reinit_every > 0 && step % reinit_every == 0)
            ncclCommInitRank(&comm, world, id, rank);
        compute(compute_us);
        ncclAllReduce(buffer, buffer, 1 << 20, ncclFloat32, ncclSum, comm, NULL);
        ncclAllReduce(buffer, buffer, 1 << 20, ncclFloat32, ncclSum, comm, NULL);
        ncclAllGather(buffer, buffer, 4096, ncclBfloat16, comm, NULL);
        ncclGroupStart();
        ncclGroupEnd();
        cudaStreamSynchronize(NULL);
        if (sleep_us > 0)
            usleep(sleep_us);
        if (counting && now_us() - last_report >= 100000) {
            last_report = now_us();
            printf("%ld %ld\n", last_report, step + 1);
            fflush(stdout);
        }
    }
    return 0;
}
