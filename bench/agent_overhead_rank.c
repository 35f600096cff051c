/* A training rank, as far as bench/agent_overhead.py's node agent can tell: a process linked against the real
 * libnccl (nvidia-nccl-cu13) and libcudart that calls ncclAllReduce and cudaStreamSynchronize every 10 ms and
 * sleeps in between (no GPU here: each call fails at once; the agent's rank-timing uprobes fire all the same).
 * It costs the machine next to nothing, unlike bench/rank_timing_target.c, which spins to measure throughput.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <time.h>

static float buffer[16];

int main(void) {
    struct timespec pause = {0, 10000000L};
    for (;;) {
        ncclAllReduce(buffer, buffer, 1024, ncclFloat32, ncclSum, NULL, NULL);
        cudaStreamSynchronize(NULL);
        nanosleep(&pause, NULL);
    }
}
