// aten::sum.dim_IntList
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x3xbf16>) -> (tensor<2xbf16>) {
    %1 = "stablehlo.convert"(%0) : (tensor<2x3xbf16>) -> tensor<2x3xf32>
    %2 = "stablehlo.constant"() {value = dense<0.00000000000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %6 = "stablehlo.reduce"(%1, %2) ({
    ^bb0(%3: tensor<f32>, %4: tensor<f32>):
      %5 = "stablehlo.add"(%3, %4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%5) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %7 = "stablehlo.convert"(%6) : (tensor<2xf32>) -> tensor<2xbf16>
    "func.return"(%7) : (tensor<2xbf16>) -> ()
  }
}
// aten::max.dim
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<2x3xf32>) -> (tensor<2x1xf32>, tensor<2x1xi64>) {
    %1 = "stablehlo.constant"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>
    %5 = "stablehlo.reduce"(%0, %1) ({
    ^bb0(%2: tensor<f32>, %3: tensor<f32>):
      %4 = "stablehlo.maximum"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %6 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %7 = "stablehlo.compare"(%0, %0) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %11 = "stablehlo.reduce"(%7, %6) ({
    ^bb0(%8: tensor<i1>, %9: tensor<i1>):
      %10 = "stablehlo.or"(%8, %9) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%10) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xi1>, tensor<i1>) -> tensor<2xi1>
    %12 = "stablehlo.constant"() {value = dense<0x7FC00000> : tensor<f32>} : () -> tensor<f32>
    %13 = "stablehlo.broadcast_in_dim"(%12) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %14 = "stablehlo.select"(%11, %13, %5) : (tensor<2xi1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64: 0>} : (tensor<2xf32>) -> tensor<2x3xf32>
    %16 = "stablehlo.compare"(%0, %15) {comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %17 = "stablehlo.compare"(%0, %0) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %18 = "stablehlo.compare"(%15, %15) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %19 = "stablehlo.and"(%17, %18) : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
    %20 = "stablehlo.or"(%16, %19) : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
    %21 = "stablehlo.constant"() {value = dense<9223372036854775807> : tensor<i64>} : () -> tensor<i64>
    %22 = "stablehlo.broadcast_in_dim"(%21) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2x3xi64>
    %23 = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<2x3xi64>
    %24 = "stablehlo.select"(%20, %23, %22) : (tensor<2x3xi1>, tensor<2x3xi64>, tensor<2x3xi64>) -> tensor<2x3xi64>
    %25 = "stablehlo.constant"() {value = dense<9223372036854775807> : tensor<i64>} : () -> tensor<i64>
    %29 = "stablehlo.reduce"(%24, %25) ({
    ^bb0(%26: tensor<i64>, %27: tensor<i64>):
      %28 = "stablehlo.minimum"(%26, %27) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      "stablehlo.return"(%28) : (tensor<i64>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xi64>, tensor<i64>) -> tensor<2xi64>
    %30 = "stablehlo.reshape"(%14) : (tensor<2xf32>) -> tensor<2x1xf32>
    %31 = "stablehlo.reshape"(%29) : (tensor<2xi64>) -> tensor<2x1xi64>
    "func.return"(%30, %31) : (tensor<2x1xf32>, tensor<2x1xi64>) -> ()
  }
}
