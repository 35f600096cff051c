/* A stand-in libnccl.so.2 for the per-rank timing test of blocked time: the real libnccl fails at once without a
 * GPU, so no call of it blocks for a known time. This library exports the symbols the rank probes attach to
 * (aiops/profile/rank_probes.py) and nccl_rank.c calls; ncclAllReduce blocks SLOW_ALL_REDUCE_US microseconds
 * (nanosleep: off-CPU, as a rank waiting for its peers is), every other call returns at once. Built with
 * -DSLOW_ALL_REDUCE_US=N and the soname libnccl.so.2 by tests/profile/test_rank_timing_ebpf.py.
 */
#include <nccl.h>
#include <time.h>

#ifndef SLOW_ALL_REDUCE_US
#define SLOW_ALL_REDUCE_US 2000
#endif

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    (void)nranks;
    (void)id;
    (void)rank;
    *comm = NULL;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)send, (void)recv, (void)count, (void)type, (void)op, (void)comm, (void)stream;
    struct timespec wait = {SLOW_ALL_REDUCE_US / 1000000, (SLOW_ALL_REDUCE_US % 1000000) * 1000L};
    while (nanosleep(&wait, &wait) != 0)
        ;
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
    (void)send, (void)recv, (void)count, (void)type, (void)comm, (void)stream;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }

ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
