#define FA_PORTABLE_STORE store_f16
#include "instance.inc"
