#define FA_PORTABLE_STORE store_bf16
#include "instance.inc"
