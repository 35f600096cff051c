/* The baseline for bench/classifier.py: a tc program that does nothing but return "no match". */
#include <uapi/linux/bpf.h>

int empty_classify(struct __sk_buff *skb) {
    return 0;
}
